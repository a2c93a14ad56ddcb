#!/usr/bin/env node
// Every operation of Horizon's AsyncAPI document (`horizon schema --asyncapi`), done from a client's
// side, with the document as its only guide: where the document says Horizon *receives*, this client
// sends (or asks), and where Horizon *sends*, it subscribes. `client.mjs` is the short story (submit,
// verdict, follow); this is the whole contract, operation by operation:
//
//   inputs      in.<verb>: submit, cancel, hold, release, update as a tenant, each publish a request
//               answered by a PubAck, then the verdict whose causation_id is "seq:<seq>", checked
//               against the operation's `x-verdicts`; a cancel of a running job also waits for the
//               agent's JobCancelled with the same causation_id; an array's JobAccepted carry
//               `array_tasks`; malformed inputs get InputRejected with the JSON `path`
//   operators   in._admin.<verb>: every operator verb, answered by an event with causation_id
//               "seq:<seq>" or, for a configuration, by `horizon.query.config`
//   queries     every request/reply operation (query.*, validate, logs, the intake, step), each
//               asked once with a request its schema allows
//   feeds       evt.<service>.<Type> (one subscription, `horizon.evt.>`, is every such channel),
//               tenantFeed, hb (a heartbeat), dlq (the dead letter of the malformed input)
//
// It prints one JSON line per operation: {"op", "subject", "sent", "answer", "verdicts", "received"},
// then {"covered": [...], "missing": [...], "failures": [...]}, so a test can validate every answer
// against the document's schemas. Exit code 0 when every operation of the document was exercised
// and every verdict was among those the document lists; 1 otherwise; 2 when an answer did not come.
//
// Usage: node operations.mjs NATS_URL DOCUMENT.json [--tenant T] [--timeout SECONDS] [--skip OP]...
// NATS_URL without accounts (plain `horizon up`): everything. A tenant's URL (`horizon tenant add
// NAME --json`): what a tenant may do; the operators' operations are listed as skipped. `--skip OP`
// leaves an operation out on purpose (e.g. `logs.tenant` on `--executor sim`, which keeps no output).

import { readFileSync } from "node:fs";
import { connect, headers } from "nats";

const enc = new TextEncoder();
const dec = new TextDecoder();

function parseArgs(argv) {
  const args = { url: undefined, doc: undefined, tenant: undefined, timeout: 60, skip: [] };
  const rest = [];
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === "--tenant") args.tenant = argv[++i];
    else if (argv[i] === "--timeout") args.timeout = Number(argv[++i]);
    else if (argv[i] === "--skip") args.skip.push(argv[++i]);
    else rest.push(argv[i]);
  }
  [args.url, args.doc] = rest;
  if (!args.url || !args.doc) {
    throw new Error("usage: node operations.mjs NATS_URL DOCUMENT.json [--tenant T] [--timeout S] [--skip OP]...");
  }
  return args;
}

function connectionOf(url) {
  const u = new URL(url);
  const options = { servers: `${u.hostname}:${u.port || 4222}`, name: "horizon-node-operations" };
  if (u.username && u.password) {
    options.user = decodeURIComponent(u.username);
    options.pass = decodeURIComponent(u.password);
  }
  if (u.protocol === "tls:") options.tls = {};
  return options;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Wait until `cond()` gives something (not undefined, false or an empty list); its value.
async function until(cond, timeoutS, what) {
  const deadline = Date.now() + timeoutS * 1000;
  for (;;) {
    const value = cond();
    if (value && !(Array.isArray(value) && value.length === 0)) return value;
    if (Date.now() > deadline) {
      const err = new Error(`no answer within ${timeoutS} s: ${what}`);
      err.noAnswer = true;
      throw err;
    }
    await sleep(20);
  }
}

// Messages as they arrive on one subscription; `wait` for the first that matches.
class Inbox {
  constructor(nc, subject) {
    this.seen = [];
    this.subject = subject;
    const sub = nc.subscribe(subject);
    (async () => {
      for await (const m of sub) {
        let body = null;
        try { body = JSON.parse(dec.decode(m.data)); } catch { /* a dead letter may be anything */ }
        const hdrs = {};
        if (m.headers) for (const k of m.headers.keys()) hdrs[k] = m.headers.get(k);
        this.seen.push({ subject: m.subject, body, raw: dec.decode(m.data), headers: hdrs });
      }
    })();
  }

  wait(match, timeoutS, what) {
    return until(() => this.seen.find(match), timeoutS, what);
  }
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const doc = JSON.parse(readFileSync(args.doc, "utf8"));
  const options = connectionOf(args.url);
  const asTenant = Boolean(options.user);
  const tenant = args.tenant ?? (asTenant ? options.user : "default");
  const nc = await connect(options);
  const T = args.timeout;
  const run = Date.now().toString(36);
  const covered = new Set();
  const skipped = [...args.skip];
  const failures = [];
  const report = (line) => { covered.add(line.op); console.log(JSON.stringify(line)); };
  const fail = (why) => { failures.push(why); };

  // 0. the feeds first, so that no answer is missed (operations tenantFeed, evt.*, hb, dlq)
  const feed = new Inbox(nc, "horizon.evt.>");
  const tenantFeed = asTenant ? feed : new Inbox(nc, `horizon.tenant.${tenant}.evt.>`);
  const hb = asTenant ? null : new Inbox(nc, "horizon.hb.>");
  const dlq = asTenant ? null : new Inbox(nc, "horizon.dlq.>");
  await nc.flush();

  // A request: the reply's JSON (a PubAck for an input).
  async function ask(subject, body, msgId) {
    const opts = { timeout: T * 1000 };
    if (msgId) { opts.headers = headers(); opts.headers.set("Nats-Msg-Id", msgId); }
    const data = typeof body === "string" ? body : JSON.stringify(body);
    const reply = await nc.request(subject, enc.encode(data), opts);
    return JSON.parse(dec.decode(reply.data));
  }

  // An input on operation `op`: its PubAck, then its verdicts (causation_id "seq:<seq>") from submission,
  // `count` of them (an array's tasks), each one among the operation's x-verdicts.
  async function input(op, subject, body, msgId, count = 1) {
    const ack = await ask(subject, body, msgId);
    if (ack.error) throw new Error(`${op}: not stored: ${JSON.stringify(ack.error)}`);
    const cause = `seq:${ack.seq}`;
    const mine = () => feed.seen.filter((m) => m.body?.causation_id === cause && m.body?.source === "submission");
    await until(() => mine().length >= count, T, `${count} verdict(s) on ${op} (${cause})`);
    const verdicts = mine().map((m) => m.body);
    const allowed = doc.operations[op]["x-verdicts"];
    for (const v of verdicts) if (!allowed.includes(v.type)) fail(`${op}: verdict ${v.type} is not among ${allowed}`);
    report({ op, subject, sent: body, answer: ack, verdicts });
    return { ack, verdicts, cause };
  }

  const jobKey = (verdict) => verdict.job_id; // the log's id for the job (under accounts <tenant>:<id>)
  const ended = (key) => feed.wait((m) => m.body?.job_id === key && ["JobSucceeded", "JobFailed", "JobCancelled"].includes(m.body?.type), T, `the end of ${key}`);
  const started = (key) => feed.wait((m) => m.body?.job_id === key && m.body?.type === "JobStarted", T, `the start of ${key}`);

  // 1. a tenant's inputs (in.submit, in.cancel, in.hold, in.release, in.update)
  const inSubject = (verb) => `horizon.in.${tenant}.${verb}`;
  const a = `ops-${run}-a`, b = `ops-${run}-b`, sweep = `ops-${run}-sweep`;
  const job = (id, extra) => ({ type: "JobSubmitted", job_id: id, tenant, source: "horizon-node-operations/1",
                               resources: { cpus: 0.1, memory: "32Mi" }, ...extra });
  const first = await input("in.submit", inSubject("submit"), job(a, { command: ["sh", "-c", "echo out of a; echo err of a >&2"], sim_runtime_s: 0.5 }), a);
  const aKey = jobKey(first.verdicts[0]);
  await ended(aKey);
  const held = await input("in.submit", inSubject("submit"), job(b, { command: ["sleep", "600"], sim_runtime_s: 600, hold: true }), b);
  const bKey = jobKey(held.verdicts[0]);
  await input("in.update", inSubject("update"), { type: "JobUpdateRequested", job_id: b, tenant, priority_class: "low" }, `${b}/update/1`);
  await input("in.release", inSubject("release"), { type: "JobReleaseRequested", job_id: b, tenant }, `${b}/release/1`);
  await started(bKey);
  await input("in.hold", inSubject("hold"), { type: "JobHoldRequested", job_id: b, tenant }, `${b}/hold/1`);
  const cancel = await input("in.cancel", inSubject("cancel"), { type: "JobCancelRequested", job_id: b, tenant }, `${b}/cancel/1`);
  if (cancel.verdicts[0].type === "JobStopRequested") { // the agent carries it out: the same causation_id
    const done = await feed.wait((m) => m.body?.type === "JobCancelled" && m.body?.job_id === bKey, T, `the cancel of ${bKey}`);
    if (done.body.causation_id !== cancel.cause) fail(`the agent's JobCancelled carries ${done.body.causation_id}, not ${cancel.cause}`);
    report({ op: "in.cancel", subject: done.subject, received: done.body });
  }
  const array = await input("in.submit", inSubject("submit"), job(sweep, { command: ["true"], sim_runtime_s: 0.2, array: "0-2" }), sweep, 3);
  for (const v of array.verdicts) if (v.array_tasks !== 3) fail(`${v.job_id}: array_tasks ${v.array_tasks}, not 3`);
  const badSubmit = await input("in.submit", inSubject("submit"),
    `{"type": "JobSubmitted", "job_id": "${a}-bad", "tenant": "${tenant}", "resources": {"gpus": "two"}}`, `${a}-bad`);
  if (badSubmit.verdicts[0].path !== "$.resources.gpus") fail(`InputRejected path ${badSubmit.verdicts[0].path}`);
  const badCancel = await input("in.cancel", inSubject("cancel"), `{"type": "JobCancelRequested", "tenant": "${tenant}"}`, `${a}-bad-cancel`);
  if (badCancel.verdicts[0].path !== "$.job_id") fail(`InputRejected path ${badCancel.verdicts[0].path}`);

  // 2. an operator's inputs (in._admin.<verb>): a job of its own to act on, then every configuration
  let configSeq = null;
  if (asTenant) {
    skipped.push(...Object.keys(doc.operations).filter((op) => op.startsWith("in._admin.")));
  } else {
    const c = `ops-${run}-c`;
    const cHeld = await input("in.submit", inSubject("submit"), job(c, { command: ["sleep", "600"], sim_runtime_s: 600, hold: true }), c);
    const cKey = jobKey(cHeld.verdicts[0]);
    const admin = async (verb, body, want) => {
      const subject = `horizon.in._admin.${verb}`;
      const ack = await ask(subject, body, `ops-${run}/${verb}`);
      if (ack.error) throw new Error(`${verb}: not stored: ${JSON.stringify(ack.error)}`);
      const cause = `seq:${ack.seq}`;
      let answers = [];
      if (want) {
        answers = (await until(() => feed.seen.filter((m) => m.body?.causation_id === cause), T,
                               `the answer to the operator's ${verb}`)).map((m) => m.body);
      }
      // whether it applied, as the operation says: `horizon.query.config` at its seq
      let config = null;
      for (let i = 0; i < 50; i++) {
        config = await ask("horizon.query.config", { seq: ack.seq });
        if (config.seen) break;
        await sleep(100);
      }
      configSeq = ack.seq;
      report({ op: `in._admin.${verb}`, subject, sent: body, answer: ack, verdicts: answers, config });
    };
    const target = (extra) => ({ job_id: cKey, tenant, ...extra }); // an operator names a job by its key
    await admin("update", { type: "JobUpdateRequested", ...target({ priority_class: "high" }) }, true);
    await admin("release", { type: "JobReleaseRequested", ...target({}) }, true);
    await admin("hold", { type: "JobHoldRequested", ...target({}) }, true);
    await admin("cancel", { type: "JobCancelRequested", ...target({ reason: "the operator's" }) }, true);
    await admin("node", { type: "NodeCommandIssued", node: `no-such-node-${run}`, action: "cordon" }, true);
    await admin("account", { type: "AccountConfigured", account: "node-client", shares: 1 });
    await admin("tenant", { type: "TenantConfigured", tenant: "node-client" }); // a tenant's limits: the defaults
    // a tenant's user and the Unix identity its jobs run as (horizon user add): here nobody's
    await admin("user", { type: "UserConfigured", tenant: "node-client", name: "node-client", uid: 65534, gid: 65534 });
    await admin("fairshare", { type: "FairShareConfigured", half_life_s: 604800 });
    await admin("policy", { type: "PolicyConfigured" });
    await admin("profile", { type: "ProfileConfigured", name: "node-client" });
    await admin("preemption", { type: "PreemptionConfigured" });
    await admin("reservation", { type: "ReservationConfigured", name: "node-client", account: "node-client",
                                 nodes: ["no-such-node"], start_ts: 4102444800, end_ts: 4102448400 });
    await admin("partition", { type: "PartitionConfigured", name: "node-client", nodes: ["no-such-node"] });
    await admin("partition-policy", { type: "PartitionPolicyConfigured", unknown: "default" });
    await admin("dataset", { type: "DatasetAvailable", dataset: "node-client-data" });
    // a license the cluster shares (horizon license set node-client 1; Slurm's Licenses=)
    await admin("license", { type: "LicenseConfigured", name: "node-client", count: 1 });
  }

  // 3. every request/reply operation, asked once (channels with a `reply`, other than the inputs').
  // A tenant asks its own names: its account imports `<view>.<tenant>` as `<view>`, and so on.
  const scheduled = await feed.wait((m) => m.body?.job_id === aKey && m.body?.type === "JobScheduled", T, "a's placement");
  const node = scheduled.body.allocations[0].node;
  const tenantNames = { "query.jobs.tenant": "horizon.query.jobs", "query.job.tenant": "horizon.query.job",
                        "query.queue.tenant": "horizon.query.queue", "query.allocations.tenant": "horizon.query.allocations",
                        "validate": `horizon.validate.${tenant}`, "logs.tenant": `horizon.logs.${node}` };
  const asks = {
    "query.jobs": { states: ["SUCCEEDED", "PENDING"], limit: 5 },
    "query.job": { job_id: a },
    "query.decisions": { job_id: a },
    "query.queue": {},
    "query.nodes": {},
    "query.gpus": { limit: 10 },
    "query.allocations": {},
    "query.usage": { history: true },
    "query.priority": {},
    "query.preempt": { job_id: a },
    "query.partitions": {},
    "query.licenses": {},
    "query.config": { seq: configSeq ?? first.ack.seq },
    "validate": job(`${a}-check`, { command: ["true"] }),
    "logs": { job_id: a },
    "intake": job(`ops-${run}-intake`, { command: ["true"], sim_runtime_s: 0.1 }),
    "step": { op: "signal", job_id: `ops-${run}-none`, attempt: 1, step: 0, signal: 10 },
  };
  const params = { tenant, node, verb: "submit" };
  for (const [op, operation] of Object.entries(doc.operations)) {
    if (!operation.reply || op.startsWith("in.")) continue;
    const channel = doc.channels[op];
    const base = op.endsWith(".tenant") ? op.slice(0, -".tenant".length) : op;
    const request = asks[op] ?? asks[base] ?? {};
    if (skipped.includes(op)) continue;
    if (asTenant && !tenantNames[op]) { skipped.push(op); continue; }
    const subject = asTenant ? tenantNames[op] : channel.address.replace(/\{(\w+)\}/g, (_, p) => params[p]);
    const msgId = op === "intake" ? request.job_id : undefined;
    let answer;
    try {
      answer = await ask(subject, op === "logs.tenant" ? { ...request, stream: "stderr" } : request, msgId);
    } catch (err) {
      fail(`${op} (${subject}): ${err.message}`);
      continue;
    }
    report({ op, subject, sent: request, answer });
  }

  // 4. what Horizon sends: the feeds, a heartbeat, the dead letter of the malformed input
  const eventOps = Object.keys(doc.operations).filter((op) => op.startsWith("evt."));
  const received = {};
  for (const m of feed.seen) {
    const [, , service, type] = m.subject.split(".");
    const op = doc.operations[`evt.${service}.${type}`] ? `evt.${service}.${type}` : `evt.${service.split("-")[0]}-partitions.${type}`;
    if (!doc.operations[op]) { fail(`an event on ${m.subject}, a channel the document does not have`); continue; }
    received[op] ??= m;
  }
  // one subscription to `horizon.evt.>` is a subscription to every evt.<service>.<Type> channel
  for (const op of eventOps) {
    const m = received[op];
    report({ op, subject: "horizon.evt.>", ...(m ? { received: m.body, on: m.subject } : {}) });
  }
  const own = await tenantFeed.wait((m) => m.body?.job_id === aKey, T, "a job's event on the tenant feed");
  report({ op: "tenantFeed", subject: own.subject, received: own.body });
  if (!asTenant) {
    const beat = await hb.wait(() => true, T, "a heartbeat");
    report({ op: "hb", subject: beat.subject, received: beat.raw });
    const letter = await dlq.wait((m) => m.raw.includes(`${a}-bad`), T, "the malformed input's dead letter");
    report({ op: "dlq", subject: letter.subject, received: letter.raw, headers: letter.headers });
  } else {
    skipped.push("hb", "dlq");
  }

  const missing = Object.keys(doc.operations).filter((op) => !covered.has(op) && !skipped.includes(op));
  console.log(JSON.stringify({ covered: [...covered].sort(), skipped, missing, failures }));
  await nc.close();
  return missing.length || failures.length ? 1 : 0;
}

main().then((code) => process.exit(code), (err) => {
  console.error(`error: ${err.message}`);
  process.exit(err.noAnswer || err.code === "TIMEOUT" ? 2 : 1);
});
