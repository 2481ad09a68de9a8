// A reference endpoint's presence and channel-registry watches (`bindConnection` in the
// reference's packages/endpoint: `new Kvm(nc)`, both buckets opened by name, `kv.watch()` awaited
// on each), made with the official NATS JS client libraries the reference uses
// (@nats-io/transport-node, @nats-io/jetstream, @nats-io/kv; pinned in package-lock.json,
// installed by scripts/nats-js.sh) by a signed-in agent connected through the plane's auth
// callout: the space's sentinel creds, the bearer as the token, the inbox nonce as the
// connection name and its inbox prefix. Each step is the one library call (or short sequence) a
// reference endpoint makes; the Rust test (daemon/tests/reference_agent_watch.rs) computes every
// byte written and checks every line.
//
// Protocol (stdin/stdout, one JSON document per line):
//   stdin line 1   the config: {server, space, creds, token, nonce, presenceKey, presence,
//                  foreignKeys, channelKey} (`presence` base64; `foreignKeys` other principals'
//                  presence keys)
//   stdout         one line per step: {step, ok, expect, ...}; `expect` is "success" or
//                  "refusal"; a failed step carries `error` (and `code` for a JetStream API
//                  error); every step carries `violations`, the server's permission violations
//                  reported while it ran.
//   stdout/stdin   the channel-registry row the agent cannot write is asked of the test:
//                  {need: "channel", key}, answered by one stdin line {revision, bytes} once the
//                  test's admin connection wrote it (bytes base64).
// Exit 0 iff every positive step succeeded and every negative step was refused; 1 at the
// first positive failure or admitted negative; 2 on a bad config or the overall deadline.

import { createInterface } from "node:readline";
import { connect, credsAuthenticator } from "@nats-io/transport-node";
import { jetstreamManager, JetStreamApiError } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";

const DEADLINE_MS = 90_000;
// How long a watcher may take to deliver an entry that was written.
const DELIVERY_MS = 10_000;
// JetStream's "consumer not found".
const CONSUMER_NOT_FOUND = 10014;

setTimeout(() => {
  process.stdout.write(
    JSON.stringify({ step: "deadline", ok: false, error: `not done within ${DEADLINE_MS} ms` }) +
      "\n",
  );
  process.exit(2);
}, DEADLINE_MS).unref();

const input = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
async function readLine() {
  const { value, done } = await input.next();
  if (done) {
    throw new Error("stdin closed while waiting for a line");
  }
  return JSON.parse(value);
}

function emit(line) {
  process.stdout.write(JSON.stringify(line) + "\n");
}

const cfg = await readLine();
const b64 = (s) => new Uint8Array(Buffer.from(s, "base64"));
const same = (a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)) === 0;

const space = cfg.space;
const presenceBucket = `cotal_presence_${space}`;
const channelsBucket = `cotal_channels_${space}`;

let nc;
const violations = [];

async function settle() {
  // The server answers a PING after everything sent before it, so every violation of the
  // step's messages has arrived once the flush returns.
  if (nc && !nc.isClosed()) {
    await nc.flush().catch(() => {});
  }
  return violations.splice(0);
}

function describe(err) {
  const out = { error: `${err?.name ?? "Error"}: ${err?.message ?? String(err)}` };
  if (err instanceof JetStreamApiError) {
    out.code = err.code;
  }
  return out;
}

// A step that must succeed; `fn` returns extra fields for its line.
async function step(name, fn) {
  let extra;
  try {
    extra = (await fn()) ?? {};
  } catch (err) {
    emit({ step: name, ok: false, expect: "success", ...describe(err), violations: await settle() });
    await nc?.close().catch(() => {});
    process.exit(1);
  }
  emit({ step: name, ok: true, expect: "success", ...extra, violations: await settle() });
}

// A step the server must refuse.
async function refused(name, fn) {
  try {
    await fn();
  } catch (err) {
    emit({ step: name, ok: false, expect: "refusal", ...describe(err), violations: await settle() });
    return;
  }
  emit({
    step: name,
    ok: true,
    expect: "refusal",
    error: "the call succeeded; the server admitted it",
    violations: await settle(),
  });
  await nc?.close().catch(() => {});
  process.exit(1);
}

function check(cond, message) {
  if (!cond) {
    throw new Error(message);
  }
}

// A started watcher: every entry it yields is recorded; `until` resolves with the first
// recorded entry matching `pred`; `ended` resolves when its iterator finishes.
function collect(watcher) {
  const entries = [];
  const waiters = [];
  const ended = (async () => {
    for await (const e of watcher) {
      entries.push(e);
      for (const w of waiters.splice(0)) {
        if (w.pred(e)) {
          w.resolve(e);
        } else {
          waiters.push(w);
        }
      }
    }
  })();
  function until(pred, what) {
    const found = entries.find(pred);
    if (found) {
      return Promise.resolve(found);
    }
    return new Promise((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`the watcher delivered no ${what} within ${DELIVERY_MS} ms`)),
        DELIVERY_MS,
      );
      waiters.push({
        pred,
        resolve: (e) => {
          clearTimeout(timer);
          resolve(e);
        },
      });
    });
  }
  return { watcher, entries, until, ended };
}

await step("connect", async () => {
  nc = await connect({
    servers: cfg.server,
    authenticator: credsAuthenticator(new TextEncoder().encode(cfg.creds)),
    token: cfg.token,
    name: cfg.nonce,
    inboxPrefix: `_INBOX_${cfg.nonce}`,
    maxReconnectAttempts: 0,
  });
  (async () => {
    for await (const s of nc.status()) {
      if (s.type === "error") {
        violations.push(String(s.error?.message ?? s.error));
      }
    }
  })().catch(() => {});
  return { server: nc.info?.version };
});

// bindConnection: `new Kvm(nc)`, each bucket bound by name.
let presenceKv, channelsKv, jsm;
await step("kv.open", async () => {
  const kvm = new Kvm(nc);
  presenceKv = await kvm.open(presenceBucket);
  channelsKv = await kvm.open(channelsBucket);
  jsm = await jetstreamManager(nc, { checkAPI: false });
});

// `await kv.watch()` on each bucket: an ordered push consumer created with
// `$JS.API.CONSUMER.CREATE.KV_<bucket>.<name>.$KV.<bucket>.>`, delivering into the
// connection's own inbox prefix.
let presence, channels;
await step("presence.watch", async () => {
  presence = collect(await presenceKv.watch());
  return { consumer: presence.watcher._data?.name };
});
await step("channels.watch", async () => {
  channels = collect(await channelsKv.watch());
  return { consumer: channels.watcher._data?.name };
});

// The agent's own presence row (`kv.put` on `<owner>.<actor>`), delivered by the watch.
const presenceValue = b64(cfg.presence);
let presenceRevision;
await step("presence.put", async () => {
  presenceRevision = await presenceKv.put(cfg.presenceKey, presenceValue);
  return { revision: presenceRevision };
});
await step("presence.update", async () => {
  const e = await presence.until(
    (e) => e.key === cfg.presenceKey && e.revision === presenceRevision,
    `entry ${cfg.presenceKey}@${presenceRevision}`,
  );
  check(e.operation === "PUT", `the delivered entry is a ${e.operation}`);
  check(same(e.value, presenceValue), "the delivered entry carries other bytes");
  return { key: e.key, revision: e.revision, isUpdate: e.isUpdate };
});

// A channel-registry row (written by the test: no agent writes the registry), delivered by
// the registry watch.
await step("channels.update", async () => {
  emit({ need: "channel", key: cfg.channelKey });
  const answer = await readLine();
  const value = b64(answer.bytes);
  const e = await channels.until(
    (e) => e.key === cfg.channelKey && e.revision === answer.revision,
    `entry ${cfg.channelKey}@${answer.revision}`,
  );
  check(e.operation === "PUT", `the delivered entry is a ${e.operation}`);
  check(same(e.value, value), "the delivered entry carries other bytes");
  return { key: e.key, revision: e.revision, isUpdate: e.isUpdate };
});

// Stopping a watch: `watcher.stop()` ends its iterator and drops the subscription; the ordered
// consumer is then deleted with the library's own call on it (`CONSUMER.DELETE`), which nats.js
// leaves to the server's inactivity threshold otherwise, and reads as gone (`CONSUMER.INFO`).
async function stop(name, w, stream) {
  await step(`${name}.stop`, async () => {
    const oc = w.watcher._data;
    check(oc && typeof oc.name === "string", "the watcher carries no consumer");
    const consumer = oc.name;
    w.watcher.stop();
    await w.ended;
    check(await oc.delete(), `the consumer ${consumer} was not deleted`);
    try {
      await jsm.consumers.info(stream, consumer);
    } catch (err) {
      check(
        err instanceof JetStreamApiError && err.code === CONSUMER_NOT_FOUND,
        `the deleted consumer's info failed other than as not found: ${describe(err).error}`,
      );
      return { consumer, entries: w.entries.length };
    }
    throw new Error(`the consumer ${consumer} still exists after its delete`);
  });
}
await stop("presence", presence, `KV_${presenceBucket}`);
await stop("channels", channels, `KV_${channelsBucket}`);

// Another principal's presence row: the same call, refused by the server.
for (const key of cfg.foreignKeys) {
  await refused(`refused.presence-put.${key}`, () =>
    presenceKv.put(key, presenceValue, { timeout: 3000 }),
  );
}

await nc.drain();
process.exit(0);
