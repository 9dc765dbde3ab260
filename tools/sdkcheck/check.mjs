// Compatibility checks of a running lithos server with the official SDKs from npm: `openai`
// (Chat Completions, Responses, models) and `@anthropic-ai/sdk` (Messages, count_tokens). The
// SDKs parse every response and stream themselves, so a shape they do not accept fails here.
//
//   SDKCHECK_URL=http://127.0.0.1:8000 SDKCHECK_MODEL=tiny SDKCHECK_MODE=model node check.mjs
//
// SDKCHECK_MODE:
//   model    — a real (tiny, random-weight) model: plain chat, streaming (the streamed text must
//              equal the non-streamed text at temperature 0), errors, and a tool round trip sent
//              by the SDK (assistant tool calls and tool results in the history: the server
//              must accept and render them).
//   scripted — a server whose model answers a script (sdkcheck_test.go): a prompt that offers
//              tools gets the Qwen3.5 tool call get_weather(city="Paris", days=3); a prompt
//              ending in a tool result gets "It is sunny in Paris."; anything else "Hello from
//              lithos.". The SDKs must parse the calls (streamed and not) and carry the round
//              trip through.
// Prints one line per check and "N passed, N failed"; exits 1 when a check fails.

import assert from "node:assert/strict";
import OpenAI from "openai";
import Anthropic from "@anthropic-ai/sdk";

const base = (process.env.SDKCHECK_URL ?? "http://127.0.0.1:8000").replace(/\/+$/, "");
const model = process.env.SDKCHECK_MODEL ?? "tiny";
const apiKey = process.env.SDKCHECK_KEY ?? "lithos-local";
const mode = process.env.SDKCHECK_MODE ?? "model";

const openai = new OpenAI({ baseURL: base + "/v1", apiKey, maxRetries: 0, timeout: 120_000 });
const anthropic = new Anthropic({ baseURL: base, apiKey, maxRetries: 0, timeout: 120_000 });

const weatherTool = {
  type: "function",
  function: {
    name: "get_weather",
    description: "Current weather for a city",
    parameters: {
      type: "object",
      properties: { city: { type: "string" }, days: { type: "integer" } },
      required: ["city"],
    },
  },
};
const weatherToolAnthropic = {
  name: "get_weather",
  description: "Current weather for a city",
  input_schema: weatherTool.function.parameters,
};
const weatherToolResponses = { type: "function", ...weatherTool.function };
const question = "What's the weather in Paris?";

let passed = 0;
let failed = 0;
async function check(name, fn) {
  try {
    await fn();
    passed++;
    console.log(`ok   ${name}`);
  } catch (err) {
    failed++;
    console.log(`FAIL ${name}: ${err?.stack ?? err}`);
  }
}

// ---- shared: models, errors ----

await check("openai: models.list lists the model", async () => {
  const ids = [];
  for await (const m of openai.models.list()) ids.push(m.id);
  assert.ok(ids.includes(model), `models ${JSON.stringify(ids)}`);
});

await check("openai: unknown model is a NotFoundError with code model_not_found", async () => {
  await assert.rejects(
    openai.chat.completions.create({ model: "no-such-model", messages: [{ role: "user", content: "hi" }], max_tokens: 4 }),
    (err) => err instanceof OpenAI.NotFoundError && err.status === 404 && err.code === "model_not_found",
  );
});

await check("openai: n=2 is a BadRequestError", async () => {
  await assert.rejects(
    openai.chat.completions.create({ model, messages: [{ role: "user", content: "hi" }], max_tokens: 4, n: 2 }),
    (err) => err instanceof OpenAI.BadRequestError && err.status === 400,
  );
});

await check("anthropic: unknown model is a NotFoundError", async () => {
  await assert.rejects(
    anthropic.messages.create({ model: "no-such-model", max_tokens: 4, messages: [{ role: "user", content: "hi" }] }),
    (err) => err instanceof Anthropic.NotFoundError && err.status === 404,
  );
});

await check("anthropic: a message list that does not start with user is a BadRequestError", async () => {
  await assert.rejects(
    anthropic.messages.create({ model, max_tokens: 4, messages: [] }),
    (err) => err instanceof Anthropic.BadRequestError && err.status === 400,
  );
});

await check("anthropic: count_tokens", async () => {
  const r = await anthropic.messages.countTokens({ model, messages: [{ role: "user", content: question }] });
  assert.ok(Number.isInteger(r.input_tokens) && r.input_tokens > 0, JSON.stringify(r));
});

if (mode === "model") {
  await modelChecks();
} else if (mode === "scripted") {
  await scriptedChecks();
} else {
  console.log(`FAIL unknown SDKCHECK_MODE ${mode}`);
  failed++;
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);

// ---- a real model: outputs are arbitrary text ----

async function modelChecks() {
  const messages = [
    { role: "system", content: "You are terse." },
    { role: "user", content: "Say something." },
  ];
  const req = { model, messages, max_tokens: 12, temperature: 0 };
  let plain;

  await check("openai chat: non-streaming", async () => {
    plain = await openai.chat.completions.create(req);
    assert.equal(plain.object, "chat.completion");
    assert.equal(plain.model, model);
    const c = plain.choices[0];
    assert.equal(c.message.role, "assistant");
    assert.equal(typeof c.message.content, "string");
    assert.ok(["stop", "length"].includes(c.finish_reason), c.finish_reason);
    assert.ok(plain.usage.prompt_tokens > 0 && plain.usage.completion_tokens > 0 && plain.usage.completion_tokens <= 12, JSON.stringify(plain.usage));
    assert.equal(plain.usage.total_tokens, plain.usage.prompt_tokens + plain.usage.completion_tokens);
  });

  await check("openai chat: streaming gives the same text, a finish reason and usage", async () => {
    const stream = await openai.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true } });
    let text = "";
    let finish = null;
    let usage = null;
    let chunks = 0;
    for await (const chunk of stream) {
      chunks++;
      assert.equal(chunk.object, "chat.completion.chunk");
      if (chunk.usage) usage = chunk.usage;
      for (const ch of chunk.choices) {
        text += ch.delta?.content ?? "";
        if (ch.finish_reason) finish = ch.finish_reason;
      }
    }
    assert.ok(chunks >= 2, `${chunks} chunks`);
    assert.equal(text, plain.choices[0].message.content);
    assert.equal(finish, plain.choices[0].finish_reason);
    assert.deepEqual(usage && { p: usage.prompt_tokens, c: usage.completion_tokens }, { p: plain.usage.prompt_tokens, c: plain.usage.completion_tokens });
  });

  await check("openai chat: the stream helper's final completion", async () => {
    const final = await openai.chat.completions.stream(req).finalChatCompletion();
    assert.equal(final.choices[0].message.content, plain.choices[0].message.content);
  });

  await check("openai chat: tool definitions, assistant tool calls and tool results are accepted and rendered", async () => {
    const history = [
      { role: "user", content: question },
      { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris","days":3}' } }] },
      { role: "tool", tool_call_id: "call_1", content: '{"temp_c": 21, "sky": "clear"}' },
    ];
    const short = await openai.chat.completions.create({ model, messages: history.slice(0, 1), tools: [weatherTool], max_tokens: 4, temperature: 0 });
    const r = await openai.chat.completions.create({ model, messages: history, tools: [weatherTool], tool_choice: "auto", max_tokens: 4, temperature: 0 });
    assert.equal(r.choices[0].message.role, "assistant");
    assert.ok(r.usage.prompt_tokens > short.usage.prompt_tokens + 10, `${r.usage.prompt_tokens} vs ${short.usage.prompt_tokens}: the tool turns were not rendered`);
  });

  await check("openai responses: non-streaming and streaming agree", async () => {
    const rreq = { model, input: "Say something.", instructions: "You are terse.", max_output_tokens: 16, temperature: 0 };
    const r = await openai.responses.create(rreq);
    assert.equal(r.object, "response");
    assert.ok(["completed", "incomplete"].includes(r.status), r.status);
    assert.equal(typeof r.output_text, "string");
    const stream = openai.responses.stream(rreq);
    const seen = new Set();
    stream.on("event", (e) => seen.add(e.type));
    const final = await stream.finalResponse();
    assert.equal(final.output_text, r.output_text);
    for (const t of ["response.created", "response.output_text.delta"]) assert.ok(seen.has(t) || r.output_text === "", `no ${t} in ${[...seen]}`);
    assert.ok(seen.has("response.completed") || seen.has("response.incomplete"), [...seen].join(","));
  });

  await check("openai responses: function_call and function_call_output input items are accepted", async () => {
    const r = await openai.responses.create({
      model, tools: [weatherToolResponses], max_output_tokens: 16, temperature: 0,
      input: [
        { role: "user", content: question },
        { type: "function_call", call_id: "call_1", name: "get_weather", arguments: '{"city":"Paris"}' },
        { type: "function_call_output", call_id: "call_1", output: '{"temp_c": 21}' },
      ],
    });
    assert.ok(r.usage.input_tokens > 20, JSON.stringify(r.usage));
  });

  const mreq = { model, max_tokens: 12, temperature: 0, system: "You are terse.", messages: [{ role: "user", content: "Say something." }] };
  let msg;
  await check("anthropic messages: non-streaming", async () => {
    msg = await anthropic.messages.create(mreq);
    assert.equal(msg.type, "message");
    assert.equal(msg.role, "assistant");
    assert.equal(msg.model, model);
    assert.ok(["end_turn", "max_tokens"].includes(msg.stop_reason), msg.stop_reason);
    assert.ok(msg.usage.input_tokens > 0 && msg.usage.output_tokens > 0, JSON.stringify(msg.usage));
  });

  await check("anthropic messages: streaming gives the same message", async () => {
    const stream = anthropic.messages.stream(mreq);
    let text = "";
    stream.on("text", (t) => (text += t));
    const final = await stream.finalMessage();
    const want = msg.content.filter((b) => b.type === "text").map((b) => b.text).join("");
    assert.equal(text, want);
    assert.equal(final.stop_reason, msg.stop_reason);
    assert.equal(final.usage.output_tokens, msg.usage.output_tokens);
  });

  await check("anthropic messages: tool_use and tool_result blocks are accepted and rendered", async () => {
    const history = [
      { role: "user", content: question },
      { role: "assistant", content: [{ type: "tool_use", id: "toolu_1", name: "get_weather", input: { city: "Paris", days: 3 } }] },
      { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: '{"temp_c": 21}' }] },
    ];
    const short = await anthropic.messages.countTokens({ model, tools: [weatherToolAnthropic], messages: history.slice(0, 1) });
    const full = await anthropic.messages.countTokens({ model, tools: [weatherToolAnthropic], messages: history });
    assert.ok(full.input_tokens > short.input_tokens + 10, `${full.input_tokens} vs ${short.input_tokens}`);
    const r = await anthropic.messages.create({ model, max_tokens: 4, temperature: 0, tools: [weatherToolAnthropic], messages: history });
    assert.equal(r.role, "assistant");
    assert.equal(r.usage.input_tokens, full.input_tokens);
  });
}

// ---- a scripted model: exact outputs, tool calls ----

async function scriptedChecks() {
  const ask = [{ role: "user", content: question }];
  const wantArgs = { city: "Paris", days: 3 };

  await check("openai chat: plain answer", async () => {
    const r = await openai.chat.completions.create({ model, messages: [{ role: "user", content: "hi" }], max_tokens: 32 });
    assert.equal(r.choices[0].message.content, "Hello from lithos.");
    assert.equal(r.choices[0].finish_reason, "stop");
  });

  let call;
  await check("openai chat: a tool call, non-streaming", async () => {
    const r = await openai.chat.completions.create({ model, messages: ask, tools: [weatherTool], max_tokens: 128 });
    const c = r.choices[0];
    assert.equal(c.finish_reason, "tool_calls");
    assert.equal(c.message.tool_calls.length, 1);
    call = c.message.tool_calls[0];
    assert.equal(call.type, "function");
    assert.equal(call.function.name, "get_weather");
    assert.deepEqual(JSON.parse(call.function.arguments), wantArgs);
    assert.match(call.id, /^call_/);
  });

  await check("openai chat: a tool call, streamed (the SDK assembles the deltas)", async () => {
    const stream = openai.chat.completions.stream({ model, messages: ask, tools: [weatherTool], max_tokens: 128 });
    let doneArgs = null;
    stream.on("tool_calls.function.arguments.done", (e) => (doneArgs = e));
    const final = await stream.finalChatCompletion();
    const c = final.choices[0];
    assert.equal(c.finish_reason, "tool_calls");
    assert.equal(c.message.tool_calls[0].function.name, "get_weather");
    assert.deepEqual(JSON.parse(c.message.tool_calls[0].function.arguments), wantArgs);
    assert.ok(doneArgs && doneArgs.name === "get_weather", JSON.stringify(doneArgs));
    assert.deepEqual(doneArgs.parsed_arguments ?? JSON.parse(doneArgs.arguments), wantArgs);
  });

  await check("openai chat: round trip with the tool result", async () => {
    assert.ok(call, "no call from the previous check");
    const r = await openai.chat.completions.create({
      model, tools: [weatherTool], max_tokens: 64,
      messages: [...ask, { role: "assistant", content: null, tool_calls: [call] }, { role: "tool", tool_call_id: call.id, content: '{"sky": "sunny"}' }],
    });
    assert.equal(r.choices[0].message.content, "It is sunny in Paris.");
    assert.equal(r.choices[0].finish_reason, "stop");
  });

  let fc;
  await check("openai responses: a function call, streamed and not", async () => {
    const rreq = { model, input: question, tools: [weatherToolResponses], max_output_tokens: 128 };
    const r = await openai.responses.create(rreq);
    fc = r.output.find((o) => o.type === "function_call");
    assert.ok(fc, JSON.stringify(r.output));
    assert.equal(fc.name, "get_weather");
    assert.deepEqual(JSON.parse(fc.arguments), wantArgs);
    const stream = openai.responses.stream(rreq);
    let argsDone = null;
    stream.on("response.function_call_arguments.done", (e) => (argsDone = e.arguments));
    const final = await stream.finalResponse();
    const sfc = final.output.find((o) => o.type === "function_call");
    assert.deepEqual(JSON.parse(sfc.arguments), wantArgs);
    assert.deepEqual(JSON.parse(argsDone), wantArgs);
  });

  await check("openai responses: round trip with function_call_output", async () => {
    assert.ok(fc, "no call from the previous check");
    const r = await openai.responses.create({
      model, tools: [weatherToolResponses], max_output_tokens: 64,
      input: [{ role: "user", content: question }, { type: "function_call", call_id: fc.call_id, name: fc.name, arguments: fc.arguments },
        { type: "function_call_output", call_id: fc.call_id, output: '{"sky": "sunny"}' }],
    });
    assert.equal(r.output_text, "It is sunny in Paris.");
  });

  let use;
  await check("anthropic messages: tool_use, non-streaming", async () => {
    const r = await anthropic.messages.create({ model, max_tokens: 128, tools: [weatherToolAnthropic], messages: ask });
    assert.equal(r.stop_reason, "tool_use");
    use = r.content.find((b) => b.type === "tool_use");
    assert.ok(use, JSON.stringify(r.content));
    assert.equal(use.name, "get_weather");
    assert.deepEqual(use.input, wantArgs);
  });

  await check("anthropic messages: tool_use, streamed (the SDK assembles input_json deltas)", async () => {
    const stream = anthropic.messages.stream({ model, max_tokens: 128, tools: [weatherToolAnthropic], messages: ask });
    const final = await stream.finalMessage();
    assert.equal(final.stop_reason, "tool_use");
    const u = final.content.find((b) => b.type === "tool_use");
    assert.deepEqual(u?.input, wantArgs);
  });

  await check("anthropic messages: round trip with tool_result", async () => {
    assert.ok(use, "no tool_use from the previous check");
    const r = await anthropic.messages.create({
      model, max_tokens: 64, tools: [weatherToolAnthropic],
      messages: [...ask, { role: "assistant", content: [use] }, { role: "user", content: [{ type: "tool_result", tool_use_id: use.id, content: "sunny" }] }],
    });
    assert.equal(r.stop_reason, "end_turn");
    assert.deepEqual(r.content.map((b) => b.text), ["It is sunny in Paris."]);
  });
}
