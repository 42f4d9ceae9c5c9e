// The official MCP TypeScript SDK client (any 1.x) as a peer.
// Usage: node ts_client.mjs SDK_DIR URL TOKEN basic|timeout-leave [RUNS]
// Prints one JSON line: what the client saw and every error it raised or reported.
// basic: connect, list tools, call `read`, ping, terminate the session, close.
// timeout-leave: RUNS times a fresh client calls a prompt-tier `write` with a 300 ms timeout
// (the SDK then sends notifications/cancelled), terminates its session and closes at once.
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";

const [sdkDir, url, token, scenario, runsArg, settleArg] = process.argv.slice(2);
const settleMs = Number(settleArg || 0); // pause between the timeout and leaving
const runs = Number(runsArg || 1);
const load = (p) => import(pathToFileURL(`${sdkDir}/dist/esm/${p}`).href);
const { Client } = await load("client/index.js");
const { StreamableHTTPClientTransport } = await load("client/streamableHttp.js");
const version = JSON.parse(readFileSync(`${sdkDir}/package.json`, "utf8")).version;

const reported = [];
for (const level of ["error", "warn"]) {
  const orig = console[level];
  console[level] = (...args) => { reported.push(`console.${level}: ${args.join(" ")}`.slice(0, 300)); };
  void orig;
}

async function session(body) {
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  const client = new Client({ name: "interop-ts", version: "1.0.0" });
  client.onerror = (e) => reported.push(`client.onerror: ${e?.message ?? e}`.slice(0, 300));
  await client.connect(transport);
  transport.onerror = (e) => reported.push(`transport.onerror: ${e?.message ?? e}`.slice(0, 300));
  try {
    return await body(client, transport);
  } finally {
    await transport.terminateSession();
    await client.close();
  }
}

async function basic(client, transport) {
  const tools = await client.listTools();
  const res = await client.callTool({ name: "read", arguments: { path: "hello.txt" } });
  await client.ping();
  return {
    protocol: transport.protocolVersion,
    server: client.getServerVersion().name,
    tools: tools.tools.map((t) => t.name),
    read: res.content[0].text,
    isError: !!res.isError,
  };
}

async function timeoutLeave(client) {
  try {
    await client.callTool({ name: "write", arguments: { path: "x.txt", content: "y" } }, undefined, { timeout: 300 });
    return "no timeout";
  } catch (e) {
    if (settleMs) await new Promise((r) => setTimeout(r, settleMs));
    return e?.constructor?.name ?? String(e);
  }
}

const out = { sdk: `typescript sdk ${version}`, runs, results: [], crashes: [] };
for (let i = 0; i < runs; i++) {
  try {
    out.results.push(await session(scenario === "basic" ? basic : timeoutLeave));
  } catch (e) {
    out.crashes.push(String(e?.stack ?? e).slice(0, 300));
  }
}
// Let late replies (the symptom measured) arrive before counting.
await new Promise((r) => setTimeout(r, 300));
out.logged = reported;
process.stdout.write(JSON.stringify(out) + "\n");
process.exit(0);
