// The chat page's demo tool set: two functions that run in the browser. The page declares them in
// session.update `tools`; when the model calls one, ChatSession runs `runDemoTool` and sends what
// it returns as the function_call_output. Failures come back as {error: "..."}, never thrown.

export const DEMO_TOOLS = [
  {
    type: "function",
    name: "get_time",
    description: "The current date and time. Leave timezone out for the user's own local time.",
    parameters: {
      type: "object",
      properties: { timezone: { type: "string", description: "Only for another place: an IANA time zone such as America/New_York, or UTC+2" } },
    },
  },
  {
    type: "function",
    name: "calculate",
    description: "Evaluate an arithmetic expression with + - * / parentheses and decimal numbers.",
    parameters: {
      type: "object",
      properties: { expression: { type: "string", description: "e.g. (12.5 + 7) * 3 / 2" } },
      required: ["expression"],
    },
  },
];

const MAX_EXPRESSION = 500;
const MAX_DEPTH = 64;

export class ExpressionError extends Error {}

/** Evaluate + - * / with parentheses, unary signs and decimals. A small recursive-descent parser: no eval. */
export function evaluate(text) {
  if (typeof text !== "string" || !text.trim()) throw new ExpressionError("empty expression");
  if (text.length > MAX_EXPRESSION) throw new ExpressionError(`expression longer than ${MAX_EXPRESSION} characters`);
  const src = text.replace(/[×xX]/g, "*").replace(/÷/g, "/").replace(/[−–]/g, "-");
  let pos = 0;
  let depth = 0;

  const skip = () => { while (pos < src.length && /\s/.test(src[pos])) pos++; };
  const peek = () => { skip(); return src[pos]; };
  const fail = (what) => {
    throw new ExpressionError(pos >= src.length ? `${what} at the end` : `${what} at position ${pos + 1} ("${src[pos]}")`);
  };

  function number() {
    skip();
    const m = /^(\d+(\.\d*)?|\.\d+)/.exec(src.slice(pos));
    if (!m) fail("expected a number or (");
    pos += m[0].length;
    return Number(m[0]);
  }

  function factor() {
    const c = peek();
    if (c === "+" || c === "-") {
      pos++;
      if (++depth > MAX_DEPTH) throw new ExpressionError("expression nested too deeply");
      const v = factor();
      depth--;
      return c === "-" ? -v : v;
    }
    if (c === "(") {
      pos++;
      if (++depth > MAX_DEPTH) throw new ExpressionError("expression nested too deeply");
      const v = expr();
      depth--;
      if (peek() !== ")") fail("expected )");
      pos++;
      return v;
    }
    return number();
  }

  function term() {
    let v = factor();
    for (let c = peek(); c === "*" || c === "/"; c = peek()) {
      pos++;
      const r = factor();
      if (c === "/" && r === 0) throw new ExpressionError("division by zero");
      v = c === "*" ? v * r : v / r;
    }
    return v;
  }

  function expr() {
    let v = term();
    for (let c = peek(); c === "+" || c === "-"; c = peek()) {
      pos++;
      const r = term();
      v = c === "+" ? v + r : v - r;
    }
    return v;
  }

  const value = expr();
  if (peek() !== undefined) fail("unexpected character");
  if (!Number.isFinite(value)) throw new ExpressionError("the result is too large");
  return Number.parseFloat(value.toPrecision(12)); // 0.1 + 0.2 -> 0.3
}

/** Intl options for a zone name: IANA names, "local", and offsets such as UTC+1, GMT-05:30, +02:00. */
function zoneOptions(zone) {
  if (!zone || /^(local|here)$/i.test(zone)) return {};
  const candidates = [zone];
  const m = /^(?:utc|gmt|z)?\s*([+-])\s*(\d{1,2})(?::?(\d{2}))?$/i.exec(zone);
  if (m) {
    const [, sign, h, mm = "00"] = m;
    candidates.unshift(`${sign}${h.padStart(2, "0")}:${mm}`); // offset zones (recent browsers)
    if (mm === "00") candidates.push(Number(h) === 0 ? "Etc/UTC" : `Etc/GMT${sign === "+" ? "-" : "+"}${Number(h)}`);
  } else if (/^(utc|gmt|z)$/i.test(zone)) {
    candidates.unshift("UTC");
  }
  for (const timeZone of candidates) {
    try {
      new Intl.DateTimeFormat("en-US", { timeZone }); // RangeError for an unknown zone
      return { timeZone };
    } catch { /* try the next spelling */ }
  }
  return null;
}

function getTime(args) {
  const now = new Date();
  const zone = args.timezone ? String(args.timezone).trim() : "";
  const opts = zoneOptions(zone);
  if (!opts) return { error: `unknown time zone: ${zone}` };
  const time = now.toLocaleTimeString("en-US", { ...opts, hour: "numeric", minute: "2-digit" });
  const date = now.toLocaleDateString("en-US", { ...opts, weekday: "long", year: "numeric", month: "long", day: "numeric" });
  return { time, date, timezone: opts.timeZone ? zone : Intl.DateTimeFormat().resolvedOptions().timeZone || "local" };
}

function calculate(args) {
  if (typeof args.expression !== "string") return { error: "expression must be a string" };
  try {
    return { expression: args.expression, result: evaluate(args.expression) };
  } catch (e) {
    return { error: `bad expression: ${e.message}` };
  }
}

const HANDLERS = { get_time: getTime, calculate };

/** Run a demo tool: `argsText` is the call's JSON arguments. Returns a plain object (the output). */
export function runDemoTool(name, argsText) {
  const handler = HANDLERS[name];
  if (!handler) return { error: `unknown function: ${name}` };
  let args;
  try {
    args = argsText && argsText.trim() ? JSON.parse(argsText) : {};
  } catch {
    return { error: "the arguments are not valid JSON" };
  }
  if (!args || typeof args !== "object" || Array.isArray(args)) return { error: "the arguments must be a JSON object" };
  try {
    return handler(args);
  } catch (e) {
    return { error: String((e && e.message) || e) };
  }
}
