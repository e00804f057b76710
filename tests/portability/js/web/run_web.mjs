// Runs every case of /cases/cases.json (tests/portability/harness.py) on onnxruntime-web's WASM
// backend, one thread, and POSTs each result to /result and {version} or {error} to /done, on the
// local server tests/portability/runtimes.py starts for the page.
import * as ort from '/ort/ort.wasm.min.mjs';
import {runCases} from '/cases.mjs';

const post = (path, body) => fetch(path, {method: 'POST', body: JSON.stringify(body)});

function base64(bytes) {
  let text = '';
  for (let i = 0; i < bytes.length; i += 0x8000) text += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(text);
}

async function main() {
  ort.env.wasm.wasmPaths = '/ort/';
  ort.env.wasm.numThreads = 1;     // threads need a cross-origin isolated page
  const read = async file => new Uint8Array(await (await fetch(`/cases/${file}`)).arrayBuffer());
  const cases = JSON.parse(new TextDecoder().decode(await read('cases.json')));
  await runCases(ort, cases, {executionProviders: ['wasm']}, read, base64, result => post('/result', result));
  await post('/done', {version: ort.env.versions.web});
}

main().catch(err => post('/done', {error: String(err && err.stack || err)}));
