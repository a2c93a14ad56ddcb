#!/usr/bin/env node
// A Horizon client in Node.js, written from Horizon's AsyncAPI document (`horizon schema --asyncapi`)
// and nothing else. It follows the document's operations in a client's direction:
//
//   1. subscribe to the feed, `horizon.evt.>`          (operations tenantFeed / evt.<service>.<Type>)
//   2. publish a JobSubmitted on `horizon.in.<tenant>.submit` as a request with the header
//      Nats-Msg-Id = job id, and read the reply: a PubAck {stream, seq}   (operation in.submit, reply pubAck)
//   3. wait for the one verdict whose causation_id is "seq:<seq>": JobAccepted, or JobRejected,
//      RequestRejected, InputRejected                   (operation in.submit's description)
//   4. print the job's decisions (JobScheduled, JobStarted, JobSucceeded, ...) until it ends
//   5. publish one malformed input ("gpus": "two") and show its InputRejected verdict
//
// Usage: node client.mjs NATS_URL [--tenant T] [--job-id ID] [--gpus N] [--timeout SECONDS] [--no-malformed]
// NATS_URL: `horizon up`'s (nats://127.0.0.1:4222), or a tenant's from `horizon tenant add NAME --json`
// (nats://NAME:PASSWORD@host:port; the tenant is then NAME unless --tenant says otherwise).
// Exit code: 0 when the job was accepted and succeeded (and the malformed input was answered
// InputRejected), 1 when it was rejected or did not succeed, 2 when an answer did not come in time.

import { connect, headers } from "nats";

const TERMINAL = new Set(["JobSucceeded", "JobFailed", "JobCancelled", "JobUnschedulable",
                          "JobDependencyNeverSatisfied", "JobRejected"]);

function parseArgs(argv) {
  const args = { url: undefined, tenant: undefined, jobId: undefined, gpus: 0, timeout: 60, malformed: true };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === "--tenant") args.tenant = argv[++i];
    else if (a === "--job-id") args.jobId = argv[++i];
    else if (a === "--gpus") args.gpus = Number(argv[++i]);
    else if (a === "--timeout") args.timeout = Number(argv[++i]);
    else if (a === "--no-malformed") args.malformed = false;
    else if (a.startsWith("-")) throw new Error(`unknown option ${a}`);
    else args.url = a;
  }
  if (!args.url) throw new Error("usage: node client.mjs NATS_URL [--tenant T] [--job-id ID] [--gpus N] [--timeout S]");
  return args;
}

// The connection options of a URL: its user and password (a tenant's URL carries them) go apart.
function connectionOf(url) {
  const u = new URL(url);
  const options = { servers: `${u.hostname}:${u.port || 4222}`, name: "horizon-node-client" };
  if (u.username && u.password) {
    options.user = decodeURIComponent(u.username);
    options.pass = decodeURIComponent(u.password);
  } else if (u.username) {
    options.token = decodeURIComponent(u.username);
  }
  if (u.protocol === "tls:") options.tls = {};
  return { options, user: u.username ? decodeURIComponent(u.username) : undefined };
}

// Events as they arrive on the feed, and a way to wait for the first that matches.
class Feed {
  constructor(sub) {
    this.seen = [];
    this.waiters = [];
    (async () => {
      for await (const m of sub) {
        let event;
        try { event = JSON.parse(new TextDecoder().decode(m.data)); } catch { continue; }
        event.__subject = m.subject;
        this.seen.push(event);
        for (const w of [...this.waiters]) if (w.match(event)) { this.waiters.splice(this.waiters.indexOf(w), 1); w.resolve(event); }
      }
    })();
  }

  // The first event (already seen, or to come) after position `from` that `match` accepts.
  next(match, timeoutS, from = 0) {
    const found = this.seen.slice(from).find(match);
    if (found) return Promise.resolve(found);
    return new Promise((resolve, reject) => {
      const waiter = { match, resolve };
      this.waiters.push(waiter);
      setTimeout(() => {
        const i = this.waiters.indexOf(waiter);
        if (i >= 0) { this.waiters.splice(i, 1); reject(new Error(`no answer within ${timeoutS} s`)); }
      }, timeoutS * 1000);
    });
  }
}

// Publish one input as a request; the reply is the PubAck (or an error: then send it again, same Msg-Id).
async function publishInput(nc, subject, body, msgId, timeoutS) {
  const h = headers();
  h.set("Nats-Msg-Id", msgId);
  const data = typeof body === "string" ? body : JSON.stringify(body);
  const reply = await nc.request(subject, new TextEncoder().encode(data), { headers: h, timeout: timeoutS * 1000 });
  const ack = JSON.parse(new TextDecoder().decode(reply.data));
  if (ack.error) throw new Error(`not stored: ${ack.error.code} ${ack.error.description}`);
  return ack;
}

function describe(event) {
  const fields = ["job_id", "attempt", "node", "exit_code", "runtime_s", "reason", "field", "path", "verb"];
  const parts = fields.filter((f) => event[f] !== undefined && event[f] !== "" && event[f] !== null)
    .map((f) => `${f}=${JSON.stringify(event[f])}`);
  if (event.type === "JobScheduled") {
    parts.push(`nodes=${JSON.stringify(event.allocations.map((a) => a.node))}`);
    parts.push(`devices=${JSON.stringify(event.allocations.flatMap((a) => a.device_ids))}`);
  }
  return `${event.type} ${parts.join(" ")}`;
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const { options, user } = connectionOf(args.url);
  const tenant = args.tenant ?? (options.user ? user : "default");
  const jobId = args.jobId ?? `node-${Date.now().toString(36)}`;
  const nc = await connect(options);
  console.log(`connected to ${options.servers} as tenant ${tenant}`);

  // 1. the feed first, so no answer is missed
  const feed = new Feed(nc.subscribe("horizon.evt.>"));
  await nc.flush();

  // 2. the submission, as the JobSubmitted schema has it
  const job = {
    type: "JobSubmitted", job_id: jobId, tenant, source: "horizon-node-client/1",
    command: ["sh", "-c", "echo hello from a Node.js client"],
    resources: { cpus: 1, memory: "64Mi", gpus: args.gpus },
    sim_runtime_s: 2,
  };
  const subject = `horizon.in.${tenant}.submit`;
  const ack = await publishInput(nc, subject, job, jobId, args.timeout);
  console.log(`published JobSubmitted ${jobId} on ${subject}`);
  console.log(`PubAck: stream ${ack.stream} seq ${ack.seq}${ack.duplicate ? " (duplicate)" : ""}`);

  // 3. the verdict: the one event whose causation_id is "seq:<seq>"
  const verdict = await feed.next((e) => e.causation_id === `seq:${ack.seq}`, args.timeout);
  console.log(`verdict (causation_id seq:${ack.seq}): ${describe(verdict)}`);
  if (verdict.type !== "JobAccepted") {
    await nc.close();
    return 1;
  }

  // 4. the job's decisions, by the id the log knows it by (under accounts <tenant>:<id>), until it ends
  const key = verdict.job_id;
  let from = 0;
  let last;
  for (;;) {
    const event = await feed.next((e) => e.job_id === key && e.type !== "JobAccepted", args.timeout, from);
    from = feed.seen.indexOf(event) + 1;
    console.log(`  ${event.__subject}: ${describe(event)}`);
    last = event;
    if (TERMINAL.has(event.type)) break;
  }
  let code = last.type === "JobSucceeded" ? 0 : 1;

  // 5. a malformed input: a string where the schema says integer. Its verdict is InputRejected.
  if (args.malformed) {
    const bad = `{"type": "JobSubmitted", "job_id": "${jobId}-bad", "tenant": "${tenant}", "resources": {"gpus": "two"}}`;
    const badAck = await publishInput(nc, subject, bad, `${jobId}-bad`, args.timeout);
    console.log(`published a malformed JobSubmitted ("gpus": "two"): PubAck seq ${badAck.seq}`);
    const answer = await feed.next((e) => e.causation_id === `seq:${badAck.seq}`, args.timeout);
    console.log(`verdict (causation_id seq:${badAck.seq}): ${describe(answer)}`);
    if (answer.type !== "InputRejected") code = 1;
  }
  await nc.close();
  return code;
}

main().then((code) => process.exit(code), (err) => {
  console.error(`error: ${err.message}`);
  process.exit(err.message.startsWith("no answer") || err.code === "TIMEOUT" ? 2 : 1);
});
