// The OpenAI Agents SDK for JavaScript (@openai/agents-realtime) in Node, over WebSocket, against
// an OmniDuplex gateway: a RealtimeAgent in a RealtimeSession with `transport: 'websocket'`, the
// service's API key (the SDK sends it as `Authorization: Bearer`, with its own `User-Agent` and
// `X-OpenAI-Agents-SDK` headers), one typed question, and the spoken reply awaited.
//
// Launched by tests/e2e/test_agents_js.py. The last line of stdout is a JSON summary: the
// assistant's answer as the session's history holds it, how much reply audio arrived, every
// `error` the session emitted (server error events, events the SDK could not parse, transport
// failures) and every warning or error the SDK logged.
//
//   node node_ws_session.mjs --url ws://HOST:PORT/v1/realtime?model=omniduplex-cascade \
//       --text "What is the capital of France?" [--instructions TEXT] [--timeout 40] [--model NAME]
//   The key comes from $OMNIDUPLEX_API_KEY (never on the command line).

import { RealtimeAgent, RealtimeSession } from '@openai/agents-realtime';

function parseArgs(argv) {
  const args = {
    timeout: 40,
    text: 'What is the capital of France?',
    instructions: 'You are a helpful assistant. Answer in one short sentence.',
  };
  for (let i = 0; i < argv.length; i += 2) {
    const name = argv[i].replace(/^--/, '');
    args[name] = argv[i + 1];
  }
  if (!args.url) throw new Error('--url is required');
  args.timeout = Number(args.timeout);
  return args;
}

const logged = [];
for (const level of ['warn', 'error']) {
  const original = console[level].bind(console);
  console[level] = (...parts) => {
    logged.push(`${level}: ${parts.map((p) => (p instanceof Error ? p.stack || p.message : typeof p === 'string' ? p : JSON.stringify(p))).join(' ')}`.slice(0, 2000));
    original(...parts); // stderr, for a human reading a failure
  };
}

function describeError(event) {
  const error = event?.error ?? event;
  if (error instanceof Error) return { kind: error.name, message: error.message.slice(0, 2000) };
  try {
    return { kind: typeof error, value: JSON.parse(JSON.stringify(error)) };
  } catch {
    return { kind: typeof error, value: String(error).slice(0, 2000) };
  }
}

function textOf(item) {
  return (item.content ?? []).map((c) => c.transcript ?? c.text ?? '').join('');
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const agent = new RealtimeAgent({
    name: 'Assistant',
    instructions: args.instructions,
  });
  const session = new RealtimeSession(agent, {
    transport: 'websocket',
    ...(args.model ? { model: args.model } : {}),
  });

  const errors = [];
  const serverEvents = {};
  const sessionEvents = {};
  let audioBytes = 0;
  let audioEvents = 0;
  let emptyAudioEvents = 0;
  let history = [];
  let agentEnd = null;
  let resolveDone;
  const done = new Promise((resolve) => { resolveDone = resolve; });
  const t0 = performance.now();
  let firstAudioS = null;

  const count = (bag, key) => { bag[key] = (bag[key] ?? 0) + 1; };
  session.on('transport_event', (event) => count(serverEvents, event.type));
  session.on('error', (event) => { count(sessionEvents, 'error'); errors.push(describeError(event)); });
  session.on('audio', (event) => {
    count(sessionEvents, 'audio');
    audioEvents += 1;
    const n = event.data?.byteLength ?? 0;
    if (n === 0) emptyAudioEvents += 1;
    audioBytes += n;
    if (firstAudioS === null) firstAudioS = (performance.now() - t0) / 1000;
  });
  for (const name of ['audio_start', 'audio_stopped', 'audio_interrupted', 'agent_start']) {
    session.on(name, () => count(sessionEvents, name));
  }
  session.on('history_updated', (h) => { count(sessionEvents, 'history_updated'); history = h; });
  session.on('agent_end', (_ctx, _agent, textOutput) => {
    count(sessionEvents, 'agent_end');
    agentEnd = textOutput;
    resolveDone(true);
  });

  let replyDone = false;
  let failure = null;
  try {
    await session.connect({ apiKey: process.env.OMNIDUPLEX_API_KEY ?? 'unused', url: args.url });
    session.sendMessage(args.text);
    const timer = new Promise((resolve) => setTimeout(() => resolve(false), args.timeout * 1000));
    replyDone = await Promise.race([done, timer]);
    if (!replyDone) failure = `no reply within ${args.timeout}s`;
    // Keep listening a moment: what the server sends after response.done counts too.
    await new Promise((resolve) => setTimeout(resolve, 1000));
  } catch (error) {
    failure = `session raised: ${error?.stack ?? error}`.slice(0, 2000);
  } finally {
    try { session.close(); } catch (error) { failure ??= `close raised: ${error}`; }
  }

  const items = history.filter((item) => item.type === 'message').map((item) => ({
    role: item.role, status: item.status, text: textOf(item),
  }));
  const summary = {
    framework: '@openai/agents-realtime',
    transport: 'websocket',
    reply_done: replyDone,
    failure,
    agent_end_text: agentEnd,
    items,
    answer: items.filter((i) => i.role === 'assistant').map((i) => i.text).join(' '),
    audio_events: audioEvents,
    empty_audio_events: emptyAudioEvents,
    audio_bytes: audioBytes,
    audio_s: Math.round((audioBytes / 2 / 24000) * 1000) / 1000,
    first_audio_s: firstAudioS === null ? null : Math.round(firstAudioS * 1000) / 1000,
    errors,
    log_warnings: logged,
    server_event_types: serverEvents,
    session_event_types: sessionEvents,
  };
  process.stdout.write(`${JSON.stringify(summary)}\n`);
}

main().then(() => process.exit(0), (error) => {
  process.stderr.write(`${error?.stack ?? error}\n`);
  process.exit(1);
});
