// node run_node.mjs NODE_MODULES CASES_JSON RESULTS_JSON: runs every case of cases.json (written by
// tests/portability/harness.py) on onnxruntime-node's CPU provider, with its default session
// options, and writes the outputs, base64-encoded, or each case's error to RESULTS_JSON.
import {readFile, writeFile} from 'node:fs/promises';
import {createRequire} from 'node:module';
import {dirname, join} from 'node:path';
import {runCases} from './cases.mjs';

const [modules, index, out] = process.argv.slice(2);
const ort = createRequire(join(modules, 'noop.js'))('onnxruntime-node');
const folder = dirname(index);
const results = [];
await runCases(ort, JSON.parse(await readFile(index, 'utf8')), {executionProviders: ['cpu']},
               file => readFile(join(folder, file)), bytes => Buffer.from(bytes).toString('base64'),
               result => results.push(result));
await writeFile(out, JSON.stringify({version: ort.env.versions.node, results}));
