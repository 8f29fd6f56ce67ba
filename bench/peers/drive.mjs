// The load generator of `make bench-peers` for the engines served over HTTP
// (Restate's ingress, Obelisk's and Stepstone's APIs): the same shapes, the same number of
// runs in flight, one Node process, keep-alive connections. Prints one JSON
// object of figures on stdout.
//
//   node drive.mjs '{"engine":"restate","url":"http://127.0.0.1:18180"}'
//   node drive.mjs '{"engine":"obelisk","url":"http://127.0.0.1:18500"}'
//   node drive.mjs '{"engine":"stepstone","url":"http://127.0.0.1:18280","token":"..."}'

const config = JSON.parse(process.argv[2]);
const WORKFLOWS = config.workflows ?? 1000;
const IN_FLIGHT = config.inFlight ?? 64;
const SEQUENTIAL = config.sequential ?? [100, 1000];
const REPEATS = config.repeats ?? 3;
const WARM_UP = config.warmUp ?? 256;

async function call(method, url, body, headers = {}) {
  const response = await fetch(url, {
    method,
    headers: { "content-type": "application/json", ...headers },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  if (!response.ok) throw new Error(`${method} ${url}: ${response.status} ${text}`);
  return text.length ? JSON.parse(text) : null;
}

// One run of `steps` sequential trivial steps, to its end, as each engine's
// documentation shows a client doing it.
const engines = {
  // Restate: a request to the ingress invokes the handler and answers with its result.
  restate: async (steps) => {
    const sum = await call("POST", `${config.url}/Bench/steps`, steps);
    if (typeof sum !== "number") throw new Error(`Restate answered ${JSON.stringify(sum)}`);
  },
  // Obelisk: a submission that follows the execution answers with its
  // result once it ends.
  obelisk: async (steps) => {
    const result = await call("POST", `${config.url}/v1/executions?follow=true`, {
      ffqn: "bench:obelisk/workflow.steps",
      params: [steps],
    });
    if (typeof result?.ok !== "number") throw new Error(`Obelisk answered ${JSON.stringify(result)}`);
  },
  // Stepstone: a start that waits answers with the run's status once it ends.
  stepstone: async (steps) => {
    const auth = { authorization: `Bearer ${config.token}` };
    const workflow = { 1: "one-step", 3: "three-steps" }[steps] ?? "sequential";
    const status = await call(
      "POST",
      `${config.url}/v1/runs?wait=60s`,
      { component: "bench", workflow, input: { n: steps } },
      auth,
    );
    if (status.state !== "completed") throw new Error(`run ${status.run_id}: ${JSON.stringify(status)}`);
  },
};
const runOne = engines[config.engine];
if (!runOne) throw new Error(`unknown engine ${config.engine}`);

// `count` runs of `steps` steps, `IN_FLIGHT` at a time: runs a second.
async function throughput(steps, count) {
  let next = 0;
  const began = performance.now();
  const worker = async () => {
    while (next < count) {
      next += 1;
      await runOne(steps);
    }
  };
  await Promise.all(Array.from({ length: Math.min(IN_FLIGHT, count) }, worker));
  return count / ((performance.now() - began) / 1000);
}

// One run of `steps` sequential steps, alone: milliseconds a step (median of REPEATS).
async function perStep(steps) {
  const samples = [];
  for (let i = 0; i < REPEATS; i++) {
    const began = performance.now();
    await runOne(steps);
    samples.push((performance.now() - began) / steps);
  }
  samples.sort((a, b) => a - b);
  return samples[Math.floor(samples.length / 2)];
}

// Warm-up: connections, caches, JIT, thread pools (runs/s still climbed
// after 128 runs on Stepstone's no-fsync store).
await throughput(1, WARM_UP);
await throughput(3, WARM_UP);
const figures = {
  runs_1_step: await throughput(1, WORKFLOWS),
  runs_3_steps: await throughput(3, WORKFLOWS),
};
for (const n of SEQUENTIAL) figures[`ms_per_step_${n}`] = await perStep(n);
console.log(JSON.stringify(figures));
