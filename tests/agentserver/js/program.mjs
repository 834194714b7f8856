// LangGraph's JavaScript SDK against a server, each call as a LangGraph user writes it:
// node program.mjs URL API_KEY prints one JSON line per call ({client, call, ok, error}).
import { Client } from "@langchain/langgraph-sdk";
const [url, key] = process.argv.slice(2);
const client = new Client({ apiUrl: url, apiKey: key });
const out = (call, ok, error) => console.log(JSON.stringify({ client: "js", call, ok, error }));
async function call(name, fn) {
  try { await fn(); out(name, true, null); } catch (e) { out(name, false, String(e).slice(0, 400)); }
}
const user = { messages: [{ role: "user", content: "hello" }] };
let thread;
await call("threads.create", async () => {
  thread = await client.threads.create();
  if (!thread.thread_id || thread.status !== "idle") throw new Error(JSON.stringify(thread));
});
await call("runs.stream(messages-tuple, values)", async () => {
  const seen = [];
  let last;
  for await (const part of client.runs.stream(thread.thread_id, "chat", { input: user, streamMode: ["messages-tuple", "values"] })) {
    seen.push(part.event);
    if (part.event === "values") last = part.data;
    if (part.event === "messages" && !(part.data[0].type === "ai" && part.data[1].langgraph_node === "reply")) throw new Error(JSON.stringify(part.data));
  }
  if (seen[0] !== "metadata" || !seen.includes("messages") || !seen.includes("values")) throw new Error(seen.join(","));
  if (last.messages.at(-1).content !== "you said: hello") throw new Error(JSON.stringify(last));
});
await call("runs.stream(custom, messages-tuple) token chunks", async () => {
  const seen = [];
  let text = "";
  for await (const part of client.runs.stream(null, "talk", { input: user, streamMode: ["custom", "messages-tuple", "updates"] })) {
    seen.push(part.event);
    if (part.event === "custom" && !part.data.thinking) throw new Error(JSON.stringify(part.data));
    if (part.event === "messages") {
      const [chunk, metadata] = part.data;
      if (chunk.type !== "AIMessageChunk" || metadata.langgraph_node !== "speak") throw new Error(JSON.stringify(part.data));
      text += chunk.content;
    }
  }
  const chunks = seen.filter((e) => e === "messages").length;
  if (text !== "owls hunt at night" || chunks < 2) throw new Error(`${text} in ${chunks}: ${seen.join(",")}`);
  if (seen.indexOf("custom") > seen.indexOf("messages") || seen.lastIndexOf("messages") > seen.indexOf("updates")) throw new Error(seen.join(","));
});
await call("resume an interrupt", async () => {
  const paused = await client.threads.create();
  const first = await client.runs.wait(paused.thread_id, "approval", { input: user });
  if (!first.__interrupt__) throw new Error(JSON.stringify(first));
  const state = await client.threads.getState(paused.thread_id);
  if (state.next[0] !== "review" || state.interrupts.length !== 1) throw new Error(JSON.stringify(state));
  const done = await client.runs.wait(paused.thread_id, "approval", { command: { resume: "yes" } });
  if (done.messages.at(-1).content !== "reviewed: yes") throw new Error(JSON.stringify(done));
});
