// Train examples/web's classifier in Node.js with onnxruntime-node: the same step, data and start as
// the page (index.html) and as `python examples/web/classifier.py`.
//
//   gcompile build examples/web/classifier.py --target web -o examples/web/build
//   npm install onnxruntime-node          # or NODE_PATH=<a node_modules folder that has it>
//   node examples/web/train_node.mjs examples/web/build --steps 200 --save checkpoint.npz
//
// --resume FILE continues from a checkpoint (gc.runtime.Trainer.save's, or --save's); --save FILE
// writes one (Trainer.load reads it); --state-dict FILE writes the parameters for a gc.nn module's
// load_state_dict; --json FILE writes the losses, step times and accuracy.
import {writeFile, readFile} from 'node:fs/promises';
import {createRequire} from 'node:module';
import {parseArgs} from 'node:util';
import {pathToFileURL} from 'node:url';
import {resolve} from 'node:path';
import {accuracy, dataset, train} from './data.mjs';

const {values: args, positionals} = parseArgs({allowPositionals: true, options: {
  steps: {type: 'string', default: '200'}, resume: {type: 'string'}, save: {type: 'string'},
  'state-dict': {type: 'string'}, json: {type: 'string'},
}});
const folder = resolve(positionals[0] || new URL('build', import.meta.url).pathname);
const ort = createRequire(import.meta.url)('onnxruntime-node');   // honours NODE_PATH
const {openBuild} = await import(pathToFileURL(`${folder}/gcompile.mjs`).href);

const build = await openBuild(ort, folder);
const options = {sessionOptions: {intraOpNumThreads: 1}};
if (args.resume) options.state = new Uint8Array(await readFile(args.resume));
const trainer = await build.trainer('train_step', options);
const data = dataset();
const steps = Number(args.steps);
const {losses, times} = await train(trainer, data, steps, (i, loss) => {
  if (i % 10 === 0 || i === steps - 1) console.log(`step ${String(trainer.stepCount - 1).padStart(4)}  loss ${loss.toFixed(4)}`);
});
const predict = (await build.model('predict')).bind(await trainer.stateDict(), 'm.');
const right = await accuracy(predict, data);
console.log(`accuracy ${(100 * right).toFixed(1)}% on ${data.n} points`);
if (args.save) await writeFile(args.save, await trainer.exportCheckpoint());
if (args['state-dict']) await writeFile(args['state-dict'], await trainer.exportStateDict());
if (args.json) await writeFile(args.json, JSON.stringify({losses, times, accuracy: right, version: ort.env.versions.node}));
