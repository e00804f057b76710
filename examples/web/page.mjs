// The page of examples/web: loads the build (./build/, from `gcompile build classifier.py --target web
// -o build`) and onnxruntime-web (./node_modules/onnxruntime-web, from `npm install onnxruntime-web`),
// trains, and draws the loss curve as it goes.
//
// Query parameters: steps=N (default 200) to train at first; ep=webgpu for ONNX Runtime's WebGPU
// provider (default: WebAssembly, one thread); log=verbose for ONNX Runtime's log in the console (which
// nodes run on which provider); keep=gpu-buffer to keep the carried state on the GPU between WebGPU
// steps; report=URL to POST the losses, step times, accuracy and
// the final checkpoint (base64) as JSON when done (tests/test_web.py reads them).
import {accuracy, dataset, train} from './data.mjs';
import {openBuild} from './build/gcompile.mjs';

const query = new URLSearchParams(location.search);
const ep = query.get('ep') || 'wasm';
const ORT = new URL('node_modules/onnxruntime-web/dist/', location.href).href;
const $ = id => document.getElementById(id);

const losses = [];
function draw() {
  const canvas = $('curve');
  const g = canvas.getContext('2d');
  const [w, h, pad] = [canvas.width, canvas.height, 30];
  g.clearRect(0, 0, w, h);
  g.strokeStyle = '#999';
  g.strokeRect(pad, 4, w - pad - 4, h - pad - 4);
  if (!losses.length) return;
  const top = Math.max(...losses);
  g.fillStyle = '#555';
  g.fillText(top.toFixed(2), 2, 14);
  g.fillText('0', 18, h - pad);
  g.fillText(`${losses.length} steps`, w - 60, h - 10);
  g.strokeStyle = '#1565c0';
  g.beginPath();
  losses.forEach((loss, i) => {
    const x = pad + (w - pad - 8) * i / Math.max(1, losses.length - 1);
    const y = 4 + (h - pad - 8) * (1 - loss / top);
    if (i) g.lineTo(x, y); else g.moveTo(x, y);
  });
  g.stroke();
}

async function main() {
  const ort = await import(ORT + (ep === 'webgpu' ? 'ort.webgpu.min.mjs' : 'ort.wasm.min.mjs'));
  ort.env.wasm.wasmPaths = ORT;
  ort.env.wasm.numThreads = 1;   // more threads need a cross-origin isolated page
  const build = await openBuild(ort, new URL('build/', location.href));
  const sessionOptions = {executionProviders: ep === 'wasm' ? ['wasm'] : [ep, 'wasm']};   // wasm: what ${ep} lacks
  if (query.get('log')) {
    ort.env.logLevel = query.get('log');
    sessionOptions.logSeverityLevel = 0;
  }
  const keepState = query.get('keep') || undefined;
  let trainer = await build.trainer('train_step', {sessionOptions, keepState});
  const predict = await build.model('predict', {sessionOptions});
  const data = dataset();
  const times = [];

  async function run(steps) {
    $('more').disabled = true;
    const result = await train(trainer, data, steps, async (i, loss) => {
      losses.push(loss);
      if (i % 5 === 0 || i === steps - 1) {
        draw();
        $('status').textContent = `step ${trainer.stepCount}: loss ${loss.toFixed(4)}`;
        await new Promise(r => setTimeout(r));   // let the page paint
      }
    });
    times.push(...result.times);
    const right = await accuracy(predict.bind(await trainer.stateDict(), 'm.'), data);
    const ms = times.slice(1).reduce((a, b) => a + b, 0) / Math.max(1, times.length - 1);
    $('status').textContent = `step ${trainer.stepCount}: loss ${losses.at(-1).toFixed(4)}, accuracy ${
      (100 * right).toFixed(1)}%, ${ms.toFixed(2)} ms per step on ${ep}`;
    const link = (id, bytes) => { $(id).href = URL.createObjectURL(new Blob([bytes])); };
    link('checkpoint', await trainer.exportCheckpoint());
    link('state-dict', await trainer.exportStateDict());
    $('more').disabled = false;
    return right;
  }

  $('more').onclick = () => run(100);
  $('resume').onchange = async event => {
    const bytes = new Uint8Array(await event.target.files[0].arrayBuffer());
    trainer = await build.trainer('train_step', {sessionOptions, keepState, state: bytes});
    $('status').textContent = `resumed at step ${trainer.stepCount}`;
  };
  const right = await run(Number(query.get('steps') || 200));
  if (query.get('report')) {
    const checkpoint = await trainer.exportCheckpoint();
    let text = '';
    for (let i = 0; i < checkpoint.length; i += 0x8000) text += String.fromCharCode(...checkpoint.subarray(i, i + 0x8000));
    await fetch(query.get('report'), {method: 'POST', body: JSON.stringify({
      losses, times, accuracy: right, version: ort.env.versions.web, ep, checkpoint: btoa(text)})});
  }
}

main().catch(async err => {
  $('status').textContent = `failed: ${err && err.message || err}`;
  if (query.get('report')) await fetch(query.get('report'), {method: 'POST', body: JSON.stringify({error: String(err && err.stack || err)})});
});
