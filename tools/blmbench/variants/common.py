# Shared by the variant filters: inserts helper functions after the CUDA prelude and checks
# that every replacement matched.
import sys

def helpers(s, code):
    anchor = "#define BLM_ALIGNED16(ptr)"
    i = s.index(anchor)
    j = s.index("\n", i) + 1
    return s[:j] + code + s[j:]

def sub(s, old, new, count=None):
    n = s.count(old)
    if n == 0 or (count is not None and n != count):
        sys.exit("variant: %r found %d times" % (old[:60], n))
    return s.replace(old, new)
