package tokenizer

import "unicode/utf8"

// byteToRune is the GPT-2 byte↔unicode table that HF's ByteLevel pre-tokenizer and decoder
// use (tokenizers `bytes_char`): the printable bytes '!'..'~', '¡'..'¬' and '®'..'ÿ' stand
// for themselves; the other 68 bytes, in increasing order, map to U+0100, U+0101, …
var byteToRune [256]rune

// runeToByte inverts byteToRune; -1 where a rune is not in the table (index < 0x144).
var runeToByte [0x144]int16

func init() {
	for i := range runeToByte {
		runeToByte[i] = -1
	}
	n := rune(0)
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			byteToRune[b] = rune(b)
		} else {
			byteToRune[b] = 256 + n
			n++
		}
		runeToByte[byteToRune[b]] = int16(b)
	}
}

// byteLevelEncode spells raw bytes the byte-level way ("Ġthe" for " the").
func byteLevelEncode(raw []byte) string {
	buf := make([]byte, 0, 2*len(raw))
	for _, c := range raw {
		buf = utf8.AppendRune(buf, byteToRune[c])
	}
	return string(buf)
}

// byteLevelDecode maps every character of tok back to its byte; ok is false if a character
// is not in the table.
func byteLevelDecode(tok string) ([]byte, bool) {
	out := make([]byte, 0, len(tok))
	for _, r := range tok {
		if r < 0 || int(r) >= len(runeToByte) || runeToByte[r] < 0 {
			return nil, false
		}
		out = append(out, byte(runeToByte[r]))
	}
	return out, true
}
