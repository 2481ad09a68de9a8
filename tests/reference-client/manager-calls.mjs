// The reference manager's registration calls (`registerRemoteManagerAuthority` in the
// reference's packages/manager), made with the official NATS JS client libraries the reference
// uses (@nats-io/transport-node, @nats-io/jetstream, @nats-io/kv; pinned in package-lock.json,
// installed by scripts/nats-js.sh) over the executor credential the plane's `prepare` issued.
// No ceremony logic lives here: each step is the one library call (or short sequence) the
// reference makes at that point, with bytes the Rust test computed
// (daemon/tests/reference_manager_client.rs).
//
// Protocol (stdin/stdout, one JSON document per line):
//   stdin line 1   the config: {server, space, instanceId, otherInstanceId, creds, nkey,
//                  contractHex, credentialId, bytes: {contract, gate, frozen, row, revoked,
//                  spec}} (bytes base64)
//   stdout         one line per step: {step, ok, expect, ...}; `expect` is "success" or
//                  "refusal"; a failed step carries `error` (and `code` for a JetStream API
//                  error); every step carries `violations`, the server's permission violations
//                  reported while it ran.
//   stdout/stdin   bytes that depend on a revision only the run learns are asked for:
//                  {need: "repair", freezeToken} / {need: "reopen", registrationRevision,
//                  processEpoch}, answered by one stdin line {bytes} (base64).
// Exit 0 iff every positive step succeeded and every negative step was refused; 1 at the
// first positive failure or admitted negative; 2 on a bad config or the overall deadline.

import { createInterface } from "node:readline";
import { connect, credsAuthenticator } from "@nats-io/transport-node";
import { jetstream, jetstreamManager, JetStreamApiError } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";

const DEADLINE_MS = 90_000;
// The reference's lost-CAS codes on a contract re-publish: wrong last (subject) sequence, and
// the per-subject discard-new refusal.
const LOST_CAS = [10071, 10164, 10077];

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

// Bytes the run can only compute once it knows a revision: asked of the Rust test.
async function need(what, fields) {
  emit({ need: what, ...fields });
  const answer = await readLine();
  return Buffer.from(answer.bytes, "base64");
}

const cfg = await readLine();
const b64 = (s) => new Uint8Array(Buffer.from(s, "base64"));
const bytes = Object.fromEntries(Object.entries(cfg.bytes).map(([k, v]) => [k, b64(v)]));
const same = (a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)) === 0;

const space = cfg.space;
const iid = cfg.instanceId;
const other = cfg.otherInstanceId;
const gateKey = `epgate.manager.${iid}`;
const familyPrefix = `epcred.manager.${iid}.`;
const repairKey = `eprepair.manager.${iid}`;
const specKey = `svc.manager.${iid}.spec`;
const governKey = "govern.manager";
const contractStream = `EPC_${space}`;

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

await step("connect", async () => {
  nc = await connect({
    servers: cfg.server,
    authenticator: credsAuthenticator(new TextEncoder().encode(cfg.creds)),
    inboxPrefix: `_INBOX_${cfg.nkey}`,
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

// registerRemoteManagerAuthority: `new Kvm(nc)`, the two buckets bound by name (no STREAM.INFO),
// and the contract store context (`jetstream(nc)`, `jetstreamManager(nc, {checkAPI: false})`).
let recordsKv, authKv, js, jsm;
await step("kv.open", async () => {
  const kvm = new Kvm(nc);
  recordsKv = await kvm.open(`cotal_records_${space}`);
  authKv = await kvm.open(`cotal_auth_${space}`);
  js = jetstream(nc);
  jsm = await jetstreamManager(nc, { checkAPI: false });
});

// publishContractArtifact: one create-only publish per digest; a lost CAS is verified by a
// Direct Get read-back. fetchContractArtifact: `last_by_subj` (the subject-scoped Direct Get),
// then the bare form with `next_by_subj` (the create-only-winner fallback).
const contractHex = cfg.contractHex;
const contractSubject = `cotal.${space}.epc.${contractHex}`;
await step("contract.publish", async () => {
  const ack = await js.publish(contractSubject, bytes.contract, {
    expect: { lastSubjectSequence: 0 },
  });
  return { stream: ack.stream, seq: ack.seq };
});
await step("contract.republish-lost-cas", async () => {
  try {
    await js.publish(contractSubject, bytes.contract, { expect: { lastSubjectSequence: 0 } });
  } catch (err) {
    check(
      err instanceof JetStreamApiError && LOST_CAS.includes(err.code),
      `a re-publish failed other than by a lost CAS: ${describe(err).error}`,
    );
    return { code: err.code };
  }
  throw new Error("a second create-only publish of the same digest was accepted");
});
await step("contract.direct-get", async () => {
  const m = await jsm.direct.getMessage(contractStream, { last_by_subj: contractSubject });
  check(m !== null, "the published artifact is absent");
  check(same(m.data, bytes.contract), "the artifact read back differs from the bytes published");
  return { seq: m.seq };
});
await step("contract.direct-get-next-by-subject", async () => {
  const m = await jsm.direct.getMessage(contractStream, { seq: 0, next_by_subj: contractSubject });
  check(m !== null, "the published artifact is absent");
  check(same(m.data, bytes.contract), "the artifact read back differs from the bytes published");
  return { seq: m.seq };
});

// observe → provisionEndpointGateOpen (create when absent).
await step("gate.observe-absent", async () => {
  const e = await authKv.get(gateKey);
  check(e === null, `the gate already exists (revision ${e?.revision}, ${e?.operation})`);
});
let gateRevision;
await step("gate.provision", async () => {
  gateRevision = await authKv.create(gateKey, bytes.gate);
  return { revision: gateRevision };
});

// The barrier: freeze (re-read, CAS at the observed revision) → enumerate the family with
// `keys()` and read each row → revoke each at its revision → the repair cursor saved and
// cleared → (the spec write) → reopen at the freeze token.
let freezeToken;
await step("gate.freeze", async () => {
  const e = await authKv.get(gateKey);
  check(e !== null && e.revision === gateRevision, "the gate moved under the freeze");
  check(same(e.value, bytes.gate), "the provisioned gate reads back other bytes");
  freezeToken = await authKv.update(gateKey, bytes.frozen, e.revision);
  return { revision: freezeToken };
});
const rowKey = `${familyPrefix}${cfg.credentialId}`;
await step("family.stage", async () => {
  return { revision: await authKv.create(rowKey, bytes.row) };
});
await step("family.keys", async () => {
  const listed = [];
  for await (const k of await authKv.keys(`${familyPrefix}>`)) {
    listed.push(k);
  }
  check(
    listed.length === 1 && listed[0] === rowKey,
    `the family listing is ${JSON.stringify(listed)}, not [${rowKey}]`,
  );
  return { keys: listed };
});
await step("family.revoke", async () => {
  const e = await authKv.get(rowKey);
  check(e !== null && e.operation === "PUT", "the staged row is not readable");
  check(same(e.value, bytes.row), "the staged row reads back other bytes");
  return { revision: await authKv.update(rowKey, bytes.revoked, e.revision) };
});
let repairRevision;
await step("repair.save", async () => {
  const e = await authKv.get(repairKey);
  check(e === null, `a repair cursor already exists (revision ${e?.revision})`);
  const cursor = await need("repair", { freezeToken });
  repairRevision = await authKv.create(repairKey, cursor);
  return { revision: repairRevision, bytes: cursor.toString("base64") };
});
await step("repair.clear", async () => {
  await authKv.delete(repairKey, { previousSeq: repairRevision });
  const e = await authKv.get(repairKey);
  check(e !== null && e.operation === "DEL", `the cursor is not cleared (${e?.operation})`);
  return { revision: e.revision };
});

// registerServiceInstance's records: the spec and governance head observed, the spec created
// (createRecordEntry: `put` with previousSeq 0) and read back.
await step("records.govern-observe", async () => {
  const e = await recordsKv.get(governKey);
  return { present: e !== null };
});
await step("records.spec-observe-absent", async () => {
  const e = await recordsKv.get(specKey);
  check(e === null, `the spec already exists (revision ${e?.revision})`);
});
let specRevision;
await step("records.spec-create", async () => {
  specRevision = await recordsKv.put(specKey, bytes.spec, { previousSeq: 0 });
  return { revision: specRevision };
});
await step("records.spec-read", async () => {
  const e = await recordsKv.get(specKey);
  check(e !== null && e.revision === specRevision, "the spec is not at the revision written");
  check(same(e.value, bytes.spec), "the spec reads back other bytes");
});

await step("gate.reopen", async () => {
  const e = await authKv.get(gateKey);
  check(e !== null && e.revision === freezeToken, "the gate moved under the freeze token");
  check(same(e.value, bytes.frozen), "the frozen gate reads back other bytes");
  const reopened = await need("reopen", { registrationRevision: specRevision, processEpoch: 0 });
  const revision = await authKv.update(gateKey, reopened, freezeToken);
  return { revision, bytes: reopened.toString("base64") };
});

// Another instance's registration surface: the same calls, refused by the server.
await refused("refused.foreign-gate-create", () =>
  authKv.create(`epgate.manager.${other}`, bytes.gate),
);
await refused("refused.foreign-family-keys", async () => {
  const listed = [];
  for await (const k of await authKv.keys(`epcred.manager.${other}.>`)) {
    listed.push(k);
  }
  return listed;
});

await nc.drain();
process.exit(0);
