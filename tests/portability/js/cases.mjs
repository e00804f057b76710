// Running the cases of tests/portability/harness.py (cases.json) on an ONNX Runtime for JavaScript:
// shared by the Node.js runner (run_node.mjs) and the page run in Chromium (web/run_web.mjs), which
// differ only in how they read files and report results.

import {ARRAYS} from '../../../gcompile/artifacts/js/gcompile.mjs';   // served at /gcompile/artifacts/js/ too

// A tensor of `dtype` and `shape` over a copy of `bytes` (a copy starts at offset 0, so every
// typed array view is aligned).
function tensor(ort, dtype, shape, bytes) {
  const Array = ARRAYS[dtype];
  if (!Array) throw new Error(`no typed array for dtype ${dtype}`);
  const copy = new Uint8Array(bytes);
  return new ort.Tensor(dtype, new Array(copy.buffer, 0, copy.byteLength / Array.BYTES_PER_ELEMENT), shape);
}

// Run every case; `read(file)` gives a file's bytes (a Uint8Array or ArrayBuffer), `report(result)`
// receives {name, outputs: [{name, dtype, shape, data}]} or {name, error}, data being `encode`d bytes.
export async function runCases(ort, cases, options, read, encode, report) {
  for (const c of cases) {
    let result;
    try {
      const session = await ort.InferenceSession.create(new Uint8Array(await read(c.model)), options);
      const feeds = {};
      for (const input of c.inputs) feeds[input.name] = tensor(ort, input.dtype, input.shape, await read(input.file));
      const got = await session.run(feeds);
      result = {name: c.name, outputs: c.outputs.filter(n => n in got).map(n => ({
        name: n, dtype: got[n].type, shape: Array.from(got[n].dims),
        data: encode(new Uint8Array(got[n].data.buffer, got[n].data.byteOffset, got[n].data.byteLength)),
      }))};
      await session.release();
    } catch (err) {
      result = {name: c.name, error: String(err && err.message || err)};
    }
    await report(result);
  }
}
