// A JobService caller in Node, built from the .proto files alone (no generated code of ours): it submits
// an echo job, watches it to its end, reads its result, and decodes the google.rpc details of a refused
// submission. tests/process/test_node_client.py runs it against the real API; it prints one JSON line.
//
// Environment: JOBS_API_TARGET (host:port), JOBS_TOKEN (a tenant's bearer token), JOBS_PAYLOAD (text).

import path from "node:path";
import { fileURLToPath } from "node:url";

import grpc from "@grpc/grpc-js";
import protoLoader from "@grpc/proto-loader";
import protobuf from "protobufjs";

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..");
const INCLUDE_DIRS = [path.join(REPO, "proto"), path.join(REPO, "proto", "third_party")];
const CALL_TIMEOUT_MS = 20_000;
const WATCH_TIMEOUT_MS = 60_000;
const TERMINAL = new Set(["JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED", "JOB_STATE_SUPERSEDED"]);

function requireEnv(name) {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
}

function deadline(ms = CALL_TIMEOUT_MS) {
  return { deadline: new Date(Date.now() + ms) };
}

function unary(client, method, request, metadata) {
  return new Promise((resolve, reject) => {
    client[method](request, metadata, deadline(), (error, response) => (error ? reject(error) : resolve(response)));
  });
}

function watch(client, request, metadata) {
  return new Promise((resolve, reject) => {
    const seen = [];
    const stream = client.WatchJob(request, metadata, deadline(WATCH_TIMEOUT_MS));
    stream.on("data", (job) => seen.push({ state: job.state, sequence: Number(job.sequence) }));
    stream.on("error", reject);
    stream.on("end", () => resolve(seen));
  });
}

// google.rpc.Status from the grpc-status-details-bin trailer, each detail unpacked by its type URL.
function errorDetails(error, rpcTypes) {
  const [raw] = error.metadata.get("grpc-status-details-bin");
  if (!raw) throw new Error(`no status details on ${error.code}: ${error.details}`);
  const status = rpcTypes.lookupType("google.rpc.Status").decode(raw);
  return status.details.map((any) => {
    const typeName = any.type_url.slice(any.type_url.lastIndexOf("/") + 1);
    const type = rpcTypes.lookupType(typeName);
    return { type: typeName, value: type.toObject(type.decode(any.value)) };
  });
}

async function main() {
  const target = requireEnv("JOBS_API_TARGET");
  const metadata = new grpc.Metadata();
  metadata.set("authorization", `Bearer ${requireEnv("JOBS_TOKEN")}`);
  const payload = Buffer.from(requireEnv("JOBS_PAYLOAD"), "utf8");

  const definition = protoLoader.loadSync("jobs/v1/jobs.proto", {
    includeDirs: INCLUDE_DIRS,
    keepCase: true,
    longs: String,
    enums: String,
    defaults: true,
  });
  const { JobService } = grpc.loadPackageDefinition(definition).jobs.v1;
  const client = new JobService(target, grpc.credentials.createInsecure());
  // The vendored google.rpc files (protobufjs has the google/protobuf ones they import built in).
  const rpcTypes = new protobuf.Root().loadSync(
    ["status.proto", "error_details.proto"].map((name) => path.join(REPO, "proto", "third_party", "google", "rpc", name)),
    { keepCase: true },
  );

  try {
    const submitted = await unary(
      client,
      "SubmitJob",
      { kind: "echo", payload, labels: { client: "node" } },
      metadata,
    );
    const jobId = submitted.job.job_id;
    const states = await watch(client, { job_id: jobId, after_sequence: 0 }, metadata);
    const last = states.at(-1);
    if (!last || !TERMINAL.has(last.state)) throw new Error(`the watch ended without a terminal state: ${JSON.stringify(states)}`);
    const result = await unary(client, "GetJobResult", { job_id: jobId }, metadata);
    const job = await unary(client, "GetJob", { job_id: jobId }, metadata);

    let refusal;
    try {
      await unary(client, "SubmitJob", { kind: "no-such-kind" }, metadata);
      throw new Error("a submission of an unknown kind was accepted");
    } catch (error) {
      if (error.code === undefined) throw error;
      refusal = { code: grpc.status[error.code], details: errorDetails(error, rpcTypes) };
    }

    process.stdout.write(
      `${JSON.stringify({
        job_id: jobId,
        created: submitted.created,
        states,
        result_payload: Buffer.from(result.payload).toString("utf8"),
        result_attempt: result.attempt,
        result_fencing_token: result.fencing_token,
        labels: job.labels,
        refusal,
      })}\n`,
    );
  } finally {
    client.close();
  }
}

main().catch((error) => {
  process.stderr.write(`${error.stack ?? error}\n`);
  process.exit(1);
});
