// The data and training loop of examples/web, shared by the page (index.html) and the Node.js script
// (train_node.mjs). dataset() makes exactly the arrays classifier.py's dataset() makes: a 32-bit
// linear congruential generator whose coordinates are multiples of 1/512, exact in float32.

export const POINTS = 512;
export const BATCH = 64;

/** `n` points in three classes: inside the circle of radius 1/2 (0), else by the sign of x·y (1, 2). */
export function dataset(n = POINTS, seed = 1) {
  const x = new Float32Array(2 * n);
  let state = seed;
  for (let i = 0; i < 2 * n; i++) {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    x[i] = ((state >>> 22) - 512) / 512;
  }
  const labels = new BigInt64Array(n);
  for (let i = 0; i < n; i++) {
    const [a, b] = [x[2 * i], x[2 * i + 1]];
    labels[i] = a * a + b * b < 0.25 ? 0n : a * b > 0 ? 1n : 2n;
  }
  return {x, labels, n};
}

/** The batch of step `i`: the data in order, BATCH points at a time, round and round. */
export function batch(data, i) {
  const start = (i * BATCH) % data.n;
  const end = Math.min(start + BATCH, data.n);
  return {x: {data: data.x.subarray(2 * start, 2 * end), dims: [end - start, 2]},
          labels: {data: data.labels.subarray(start, end), dims: [end - start]}};
}

/** Train for `steps` steps, calling onStep(i, loss) after each; returns the losses and ms per step. */
export async function train(trainer, data, steps, onStep = () => {}) {
  const losses = [];
  const times = [];
  for (let i = 0; i < steps; i++) {
    const start = performance.now();
    const loss = await trainer.step(batch(data, trainer.stepCount));
    times.push(performance.now() - start);
    losses.push(loss);
    await onStep(i, loss);
  }
  return {losses, times};
}

/** The fraction of the data `predict` (bound to the trained parameters) classifies right. */
export async function accuracy(predict, data) {
  const {output} = await predict.run({x: {data: data.x, dims: [data.n, 2]}});
  const p = output.data;
  let right = 0;
  for (let i = 0; i < data.n; i++) {
    const row = [p[3 * i], p[3 * i + 1], p[3 * i + 2]];
    if (BigInt(row.indexOf(Math.max(...row))) === data.labels[i]) right += 1;
  }
  return right / data.n;
}
