// The gateway through the official TypeScript SDKs (`@anthropic-ai/sdk`, `openai`).
//
//     node sdk_ts.mjs BASE_URL KEY
//
// BASE_URL is the gateway's, without /v1, serving `claude-sonnet-4-5` (an Anthropic upstream)
// and `gpt-5.5` (an OpenAI-compatible one), as through_gateway.py sets it up. Each SDK asks a
// whole and a streamed answer of both models (the OpenAI SDK through chat completions and
// through Responses); the Anthropic SDK also counts tokens. Exits 1 on the first check that
// fails.

import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";

const [base, key] = process.argv.slice(2);
const models = ["claude-sonnet-4-5", "gpt-5.5"];
const ask = [{ role: "user", content: "Say hi" }];

function check(ok, what, value) {
  if (!ok) {
    console.error(`FAIL: ${what}: ${JSON.stringify(value)}`);
    process.exit(1);
  }
}

async function anthropicSdk() {
  const client = new Anthropic({ baseURL: base, apiKey: key, maxRetries: 0 });
  for (const model of models) {
    const whole = await client.messages.create({ model, max_tokens: 64, messages: ask });
    check(whole.type === "message" && whole.content[0].type === "text", "anthropic whole", whole);
    const stream = client.messages.stream({ model, max_tokens: 64, messages: ask });
    const kinds = [];
    for await (const event of stream) kinds.push(event.type);
    const final = await stream.finalMessage();
    check(kinds[0] === "message_start" && kinds.at(-1) === "message_stop", "anthropic events", kinds);
    check(final.content[0].text.length > 0, "anthropic streamed text", final);
  }
  const count = await client.messages.countTokens({ model: models[0], messages: ask });
  check(count.input_tokens > 0, "anthropic count_tokens", count);
}

async function openaiSdk() {
  const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: key, maxRetries: 0 });
  for (const model of models) {
    const whole = await client.chat.completions.create({ model, messages: ask });
    check(whole.choices[0].message.content.length > 0, "openai whole", whole);
    const stream = await client.chat.completions.create({
      model,
      messages: ask,
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = "";
    let usage = null;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta?.content ?? "";
      usage = chunk.usage ?? usage;
    }
    check(text.length > 0 && usage && usage.total_tokens > 0, "openai streamed", { text, usage });
    const response = await client.responses.create({ model, input: "Say hi" });
    check(response.status === "completed" && response.output_text.length > 0, "responses whole", response);
    const events = await client.responses.create({ model, input: "Say hi", stream: true });
    const types = [];
    let completed = null;
    for await (const event of events) {
      types.push(event.type);
      if (event.type === "response.completed") completed = event.response;
    }
    check(types[0] === "response.created" && completed?.usage?.total_tokens > 0, "responses streamed", types);
  }
}

await anthropicSdk();
await openaiSdk();
console.log("sdk_ts: @anthropic-ai/sdk (messages, count_tokens) and openai (chat completions, responses), whole and streamed on both upstreams: ok");
