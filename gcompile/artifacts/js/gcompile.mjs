// gcompile.mjs: train and run gcompile's models with ONNX Runtime for the web or for Node.js.
//
// `gcompile build MODEL.py --target web` writes this module beside the .onnx files and manifest.json
// (docs/web.md). It has no dependencies and needs no build step: give it the onnxruntime-web or
// onnxruntime-node module you loaded, as `ort`.
//
//   import * as ort from 'onnxruntime-web';
//   import {openBuild} from './build/gcompile.mjs';
//   const build = await openBuild(ort, './build/');
//   const trainer = await build.trainer('train_step');           // starts from train_step.init.npz
//   const loss = await trainer.step({x, labels});                // ort.Tensors, or {data, dims}
//   const bytes = await trainer.exportCheckpoint();              // gc.runtime.Trainer.load reads it
//
// State crosses to and from Python as .npz files: a state dict (parameters and buffers by name: a
// gc.nn module's save/load_state_dict) or a Trainer checkpoint (params/<name>, buffers/<name>,
// state/<name> and step: Trainer.save/load). Types: gcompile.d.ts.

/** The typed array of each tensor type (ort.Tensor's data; bool as bytes). */
export const ARRAYS = {
  float32: Float32Array, float64: Float64Array, float16: Uint16Array, int64: BigInt64Array,
  int32: Int32Array, int16: Int16Array, int8: Int8Array, uint64: BigUint64Array, uint32: Uint32Array,
  uint16: Uint16Array, uint8: Uint8Array, bool: Uint8Array,
};
const DESCR = {
  float32: '<f4', float64: '<f8', float16: '<f2', int64: '<i8', int32: '<i4', int16: '<i2', int8: '|i1',
  uint64: '<u8', uint32: '<u4', uint16: '<u2', uint8: '|u1', bool: '|b1',
};
const DTYPE = Object.fromEntries(Object.entries(DESCR).map(([k, v]) => [v, k]));

const isNode = typeof process !== 'undefined' && !!(process.versions && process.versions.node);

/** Open the build folder `where` (a URL, or in Node.js a path) written by `gcompile build --target web`. */
export async function openBuild(ort, where, options = {}) {
  const read = options.read || reader(where);
  const manifest = JSON.parse(new TextDecoder().decode(await read('manifest.json')));
  return new Build(ort, manifest, read);
}

function reader(where) {
  const base = String(where).endsWith('/') ? String(where) : `${where}/`;
  if (isNode && !/^(https?|data|blob):/.test(base)) {
    return async file => {
      const {readFile} = await import('node:fs/promises');
      return new Uint8Array(await readFile(base.startsWith('file:') ? new URL(file, base) : base + file));
    };
  }
  const url = new URL(base, globalThis.location ? globalThis.location.href : undefined);
  return async file => {
    const response = await fetch(new URL(file, url));
    if (!response.ok) throw new Error(`cannot fetch ${file} from ${url}: HTTP ${response.status}`);
    return new Uint8Array(await response.arrayBuffer());
  };
}

async function sha256(bytes) {
  const subtle = globalThis.crypto && globalThis.crypto.subtle;   // absent on plain http pages off localhost
  if (!subtle) return null;
  const digest = new Uint8Array(await subtle.digest('SHA-256', bytes));
  return Array.from(digest, b => b.toString(16).padStart(2, '0')).join('');
}

export class Build {
  constructor(ort, manifest, read) {
    this.ort = ort;
    this.manifest = manifest;
    this.read = read;
  }

  /** The manifest entry of artifact `name`. */
  artifact(name) {
    const entry = this.manifest.artifacts.find(a => a.name === name);
    if (!entry) {
      throw new Error(`the build has no artifact ${JSON.stringify(name)} (it has: ${
        this.manifest.artifacts.map(a => a.name).join(', ')})`);
    }
    return entry;
  }

  /** An ONNX Runtime session of artifact `name`, its file checked against the manifest's sha256. */
  async session(name, sessionOptions = {}) {
    const entry = this.artifact(name);
    const bytes = await this.read(entry.file);
    const digest = await sha256(bytes);
    if (digest !== null && digest !== entry.sha256) {
      throw new Error(`${entry.file} is not the file manifest.json lists (sha256 ${digest}, expected ${
        entry.sha256}): rebuild, or copy the whole build folder`);
    }
    const options = {...sessionOptions};
    if (entry.external_data) {
      options.externalData = [{path: entry.external_data.file, data: await this.read(entry.external_data.file)}];
    }
    return this.ort.InferenceSession.create(bytes, options);
  }

  /** A Trainer of training step `name`, starting from its .init.npz (or `options.state`: .npz bytes). */
  async trainer(name, options = {}) {
    const entry = this.artifact(name);
    if (!entry.train_step) throw new Error(`${name} is not a training step; open it with build.model()`);
    const sessionOptions = {...options.sessionOptions};
    if (options.keepState) {   // e.g. 'gpu-buffer' with WebGPU: the carried state never leaves the device
      sessionOptions.preferredOutputLocation = Object.fromEntries(
        carried(entry.train_step).map(n => [`${n}.new`, options.keepState]));
    }
    const trainer = new Trainer(this.ort, await this.session(name, sessionOptions), entry);
    const state = options.state || (entry.init ? await this.read(entry.init) : null);
    if (!state) throw new Error(`${name} has no .init.npz: give options.state (a state dict or checkpoint .npz)`);
    const arrays = await readNpz(state);
    await ('step' in arrays ? trainer.importCheckpoint(arrays) : trainer.importStateDict(arrays));
    return trainer;
  }

  /** A Model (a forward or gradient function) of artifact `name`. */
  async model(name, options = {}) {
    return new Model(this.ort, await this.session(name, options.sessionOptions), this.artifact(name));
  }
}

function carried(layout) {
  return [...layout.params, ...layout.buffers, ...layout.state.map(s => s[0]), 'step'];
}

// A tensor of the declared type from an ort.Tensor or {data, dims} (data a typed array or numbers).
function asTensor(ort, value, declared) {
  const where = `input ${JSON.stringify(declared.name)}`;
  let tensor = value;
  if (!(value instanceof ort.Tensor)) {
    if (!value || value.data === undefined || value.dims === undefined) {
      throw new Error(`${where}: give an ort.Tensor or {data, dims}`);
    }
    const Typed = ARRAYS[declared.dtype];
    let data = value.data;
    if (!(data instanceof Typed)) {
      data = Typed === BigInt64Array || Typed === BigUint64Array ? Typed.from(data, BigInt) : Typed.from(data);
    }
    tensor = new ort.Tensor(declared.dtype, data, value.dims);
  }
  const shape = declared.shape;
  const fits = tensor.type === declared.dtype && tensor.dims.length === shape.length &&
    shape.every((d, i) => typeof d !== 'number' || d === tensor.dims[i]);
  if (!fits) {
    throw new Error(`${where}: expected ${declared.dtype}[${shape.join(', ')}], got ${tensor.type}[${
      tensor.dims.join(', ')}]`);
  }
  return tensor;
}

function scalar(ort, dtype, value) {
  const Typed = ARRAYS[dtype];
  return new ort.Tensor(dtype, Typed.from([Typed === BigInt64Array || Typed === BigUint64Array ? BigInt(value) : value]), []);
}

const ON_CPU = ['cpu', 'cpu-pinned', undefined];

async function cpuData(tensor) {   // a tensor on a device (WebGPU's 'gpu-buffer') is downloaded
  return ON_CPU.includes(tensor.location) ? tensor.data : tensor.getData();
}

export class Trainer {
  constructor(ort, session, entry) {
    this.ort = ort;
    this.session = session;
    this.entry = entry;
    this.layout = entry.train_step;
    this.types = Object.fromEntries([...entry.inputs, ...entry.outputs].map(v => [v.name, v]));
    this.hyperparams = Object.fromEntries((this.layout.hyperparams || []).map(([n, value]) => [n, value]));
    this.aux = {};
    this.stepCount = 0;
    this.skippedSteps = 0;
    this.live = {};
  }

  get carried() {
    return carried(this.layout);
  }

  /** One step on `batch` (by name, or in the step's batch order); returns the loss before the update.
   * A step whose loss or a gradient is not finite changes nothing where the step was exported with
   * skip_nonfinite (the default): skippedSteps counts those, stepCount the steps applied. */
  async step(batch, hyperparams = {}) {
    const names = this.layout.batch;
    const given = Array.isArray(batch) ? Object.fromEntries(batch.map((v, i) => [names[i], v])) : batch;
    const unknown = Object.keys(given).filter(n => !names.includes(n));
    const missing = names.filter(n => !(n in given));
    if (unknown.length || missing.length) {
      throw new Error(`the step takes the batch ${names.join(', ')}; ${
        missing.length ? `missing ${missing.join(', ')}` : `unknown ${unknown.join(', ')}`}`);
    }
    const feeds = {...this.live};
    for (const n of names) feeds[n] = asTensor(this.ort, given[n], this.types[n]);
    for (const [n, , dtype] of this.layout.hyperparams || []) {
      const value = n in hyperparams ? hyperparams[n] : this.hyperparams[n];
      feeds[n] = scalar(this.ort, dtype, typeof value === 'function' ? value(this.stepCount) : value);
    }
    const out = await this.session.run(feeds);
    const next = {};
    for (const n of this.carried) next[n] = out[`${n}.new`];
    for (const n of this.carried) {   // a tensor on a device is freed by hand; the step replaced it
      if (this.live[n] && !ON_CPU.includes(this.live[n].location)) this.live[n].dispose();
    }
    this.live = next;
    this.aux = Object.fromEntries((this.layout.aux || []).map(n => [n, out[n]]));
    // a step the guard skipped (its loss or a gradient not finite) gave back what it was fed
    if (this.layout.skip_nonfinite && (await cpuData(out.skipped))[0]) this.skippedSteps += 1;
    else this.stepCount += 1;
    return Number((await cpuData(out.loss))[0]);
  }

  /** The current values of `names` (default: everything carried), copied to the CPU. */
  async values(names = this.carried) {
    const found = {};
    for (const n of names) {
      const t = this.live[n];
      found[n] = new this.ort.Tensor(t.type, (await cpuData(t)).slice(), t.dims);
    }
    return found;
  }

  /** Parameters and buffers by name (what a gc.nn module's load_state_dict takes). */
  async stateDict() {
    return this.values([...this.layout.params, ...this.layout.buffers]);
  }

  /** The state dict as .npz bytes: `module.load_state_dict(path)` and `Trainer(path, params=...)` read it. */
  async exportStateDict() {
    return writeNpz(await this.stateDict());
  }

  /** Everything a step carries as a Trainer checkpoint (.npz bytes): gc.runtime.Trainer.load reads it. */
  async exportCheckpoint() {
    const values = await this.values();
    const arrays = {};
    for (const [entry, n] of this.#entries()) arrays[entry] = values[n];
    return writeNpz(arrays);
  }

  /** Resume from a checkpoint (Trainer.save's .npz, or exportCheckpoint's): bytes or readNpz's arrays. */
  async importCheckpoint(source) {
    const arrays = source instanceof Uint8Array || source instanceof ArrayBuffer ? await readNpz(source) : source;
    const entries = this.#entries();
    checkNames('checkpoint', Object.keys(arrays), entries.map(([entry]) => entry));
    this.#set(Object.fromEntries(entries.map(([entry, n]) => [n, arrays[entry]])));
  }

  /** Start from parameters and buffers (.npz bytes or {name: array}); optimizer state and step start afresh. */
  async importStateDict(source) {
    const arrays = source instanceof Uint8Array || source instanceof ArrayBuffer ? await readNpz(source) : source;
    checkNames('state dict', Object.keys(arrays), [...this.layout.params, ...this.layout.buffers]);
    const values = {...arrays};
    for (const [n, param, fill] of this.layout.state) {
      const p = this.types[param];
      const size = p.shape.reduce((a, b) => a * b, 1);
      values[n] = {type: p.dtype, dims: p.shape, data: ARRAYS[p.dtype].from({length: size}, () => fill)};
    }
    values.step = {type: 'int64', dims: [], data: BigInt64Array.of(0n)};
    this.#set(values);
  }

  #entries() {
    const l = this.layout;
    return [...l.params.map(n => [`params/${n}`, n]), ...l.buffers.map(n => [`buffers/${n}`, n]),
      ...l.state.map(([n]) => [`state/${n}`, n]), ['step', 'step']];
  }

  #set(values) {
    const live = {};
    for (const n of this.carried) {
      const v = values[n];
      const declared = this.types[n];
      const type = v.type || declared.dtype;
      const dims = Array.from(v.dims);
      if (type !== declared.dtype || dims.join() !== declared.shape.join()) {
        throw new Error(`${n}: the training step expects ${declared.dtype}[${declared.shape.join(', ')}], got ${
          type}[${dims.join(', ')}]`);
      }
      live[n] = new this.ort.Tensor(type, v.data.slice(), dims);   // a copy: the caller's arrays stay theirs
    }
    this.live = live;
    this.stepCount = Number(live.step.data[0]);
  }

  async release() {
    await this.session.release();
  }
}

function checkNames(what, got, expected) {
  const missing = expected.filter(n => !got.includes(n));
  const extra = got.filter(n => !expected.includes(n));
  if (missing.length || extra.length) {
    throw new Error(`${what} entries do not match the training step: ${[
      missing.length ? `missing ${missing.join(', ')}` : '', extra.length ? `unexpected ${extra.join(', ')}` : '',
    ].filter(Boolean).join('; ')}`);
  }
}

export class Model {
  constructor(ort, session, entry) {
    this.ort = ort;
    this.session = session;
    this.entry = entry;
    this.inputs = entry.inputs;
    this.outputs = entry.outputs;
    this.bound = {};
  }

  /** Feed `values` ({name: ort.Tensor or {data, dims}}) to input `prefix + name` on every run, e.g.
   * `model.bind(await trainer.stateDict(), 'm.')` for a function exported with a module argument m. */
  bind(values, prefix = '') {
    for (const [name, value] of Object.entries(values)) {
      const declared = this.inputs.find(v => v.name === prefix + name);
      if (!declared) throw new Error(`${this.entry.name} has no input ${JSON.stringify(prefix + name)}`);
      this.bound[declared.name] = asTensor(this.ort, value, declared);
    }
    return this;
  }

  /** Run on `feeds` (with the bound inputs); the outputs by name, as ort.Tensors. */
  async run(feeds = {}) {
    const all = {...this.bound};
    for (const [name, value] of Object.entries(feeds)) {
      const declared = this.inputs.find(v => v.name === name);
      if (!declared) throw new Error(`${this.entry.name} has no input ${JSON.stringify(name)}`);
      all[name] = asTensor(this.ort, value, declared);
    }
    const missing = this.inputs.map(v => v.name).filter(n => !(n in all));
    if (missing.length) throw new Error(`${this.entry.name}: no value for input ${missing.join(', ')}`);
    return this.session.run(all);
  }

  async release() {
    await this.session.release();
  }
}

// -- .npz files: a zip of .npy entries, as numpy writes them (np.savez; np.savez_compressed's deflated
// entries too, where the JavaScript runtime has DecompressionStream) ---------------------------------

/** The arrays of an .npz file: {name: {type, dims, data}}, which `new ort.Tensor(type, data, dims)` takes. */
export async function readNpz(source) {
  const bytes = source instanceof Uint8Array ? source : new Uint8Array(source);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let end = bytes.length - 22;
  while (end >= 0 && view.getUint32(end, true) !== 0x06054b50) end -= 1;
  if (end < 0) throw new Error('not an .npz file (no zip directory)');
  const count = view.getUint16(end + 10, true);
  let at = view.getUint32(end + 16, true);
  const arrays = {};
  for (let i = 0; i < count; i++) {
    if (view.getUint32(at, true) !== 0x02014b50) throw new Error('.npz: a broken zip directory');
    const method = view.getUint16(at + 10, true);
    let compressed = view.getUint32(at + 20, true);
    let size = view.getUint32(at + 24, true);
    const nameLength = view.getUint16(at + 28, true);
    const extraLength = view.getUint16(at + 30, true);
    let offset = view.getUint32(at + 42, true);
    const name = new TextDecoder().decode(bytes.subarray(at + 46, at + 46 + nameLength));
    for (let e = at + 46 + nameLength; e < at + 46 + nameLength + extraLength;) {   // zip64 sizes
      const id = view.getUint16(e, true);
      let field = e + 4;
      if (id === 1) {
        if (size === 0xffffffff) { size = Number(view.getBigUint64(field, true)); field += 8; }
        if (compressed === 0xffffffff) { compressed = Number(view.getBigUint64(field, true)); field += 8; }
        if (offset === 0xffffffff) offset = Number(view.getBigUint64(field, true));
      }
      e += 4 + view.getUint16(e + 2, true);
    }
    at += 46 + nameLength + extraLength + view.getUint16(at + 32, true);
    const start = offset + 30 + view.getUint16(offset + 26, true) + view.getUint16(offset + 28, true);
    let data = bytes.subarray(start, start + compressed);
    if (method === 8) data = await inflate(data);
    else if (method !== 0) throw new Error(`.npz entry ${name}: zip method ${method} is not supported`);
    if (data.length !== size) throw new Error(`.npz entry ${name}: ${data.length} bytes, expected ${size}`);
    arrays[name.replace(/\.npy$/, '')] = readNpy(data, name);
  }
  return arrays;
}

async function inflate(data) {
  if (typeof DecompressionStream === 'undefined') throw new Error('.npz: compressed entries need DecompressionStream');
  const stream = new Blob([data]).stream().pipeThrough(new DecompressionStream('deflate-raw'));
  return new Uint8Array(await new Response(stream).arrayBuffer());
}

function readNpy(bytes, name) {
  const magic = [0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59];   // \x93NUMPY
  if (!magic.every((b, i) => bytes[i] === b)) throw new Error(`.npz entry ${name} is not a .npy array`);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const long = bytes[6] >= 2;
  const headerLength = long ? view.getUint32(8, true) : view.getUint16(8, true);
  const begin = long ? 12 : 10;
  const header = new TextDecoder().decode(bytes.subarray(begin, begin + headerLength));
  const descr = /'descr':\s*'([^']*)'/.exec(header);
  const fortran = /'fortran_order':\s*(True|False)/.exec(header);
  const shape = /'shape':\s*\(([^)]*)\)/.exec(header);
  const type = descr && DTYPE[descr[1].replace(/^=/, '<')];
  if (!type || !fortran || !shape) throw new Error(`.npz entry ${name}: unsupported .npy header ${header.trim()}`);
  if (fortran[1] === 'True') throw new Error(`.npz entry ${name} is in Fortran order; save a C-order array`);
  const dims = shape[1].split(',').map(s => s.trim()).filter(Boolean).map(Number);
  const Typed = ARRAYS[type];
  const body = bytes.slice(begin + headerLength);   // a copy, aligned for the typed array
  const length = dims.reduce((a, b) => a * b, 1);
  if (body.length !== length * Typed.BYTES_PER_ELEMENT) {
    throw new Error(`.npz entry ${name}: ${body.length} bytes of data for ${type}[${dims.join(', ')}]`);
  }
  return {type, dims, data: new Typed(body.buffer, 0, length)};
}

/** An .npz file (np.load, Trainer.load and load_state_dict read it) of {name: ort.Tensor or {type, dims, data}}. */
export function writeNpz(arrays) {
  const encoder = new TextEncoder();
  const parts = [];
  const directory = [];
  let offset = 0;
  for (const [key, array] of Object.entries(arrays)) {
    const name = encoder.encode(`${key}.npy`);
    const data = npy(array);
    const crc = crc32(data);
    const local = new DataView(new ArrayBuffer(30));
    zipHeader(local, 0x04034b50, 4, crc, data.length, name.length);
    parts.push(new Uint8Array(local.buffer), name, data);
    const central = new DataView(new ArrayBuffer(46));
    central.setUint32(0, 0x02014b50, true);
    central.setUint16(4, 20, true);                   // made by: version 2.0
    zipHeader(central, null, 6, crc, data.length, name.length);
    central.setUint32(42, offset, true);
    directory.push(new Uint8Array(central.buffer), name);
    offset += 30 + name.length + data.length;
  }
  const size = directory.reduce((a, p) => a + p.length, 0);
  const end = new DataView(new ArrayBuffer(22));
  end.setUint32(0, 0x06054b50, true);
  end.setUint16(8, Object.keys(arrays).length, true);
  end.setUint16(10, Object.keys(arrays).length, true);
  end.setUint32(12, size, true);
  end.setUint32(16, offset, true);
  const all = [...parts, ...directory, new Uint8Array(end.buffer)];
  const out = new Uint8Array(all.reduce((a, p) => a + p.length, 0));
  let at = 0;
  for (const p of all) { out.set(p, at); at += p.length; }
  return out;
}

// The fields a local header (at 4) and a directory entry (at 6) share: version 2.0, no flags, stored,
// 1980-01-01 00:00, the CRC, sizes and name length.
function zipHeader(view, signature, at, crc, size, nameLength) {
  if (signature !== null) view.setUint32(0, signature, true);
  view.setUint16(at, 20, true);
  view.setUint16(at + 6, 0, true);
  view.setUint16(at + 8, 0x21, true);
  view.setUint32(at + 10, crc, true);
  view.setUint32(at + 14, size, true);
  view.setUint32(at + 18, size, true);
  view.setUint16(at + 22, nameLength, true);
}

function npy(array) {
  const descr = DESCR[array.type];
  if (!descr) throw new Error(`.npz: no .npy type for ${array.type}`);
  const dims = Array.from(array.dims);
  const shape = dims.length === 1 ? `(${dims[0]},)` : `(${dims.join(', ')})`;
  let header = `{'descr': '${descr}', 'fortran_order': False, 'shape': ${shape}, }`;
  header += ' '.repeat(63 - ((10 + header.length) % 64)) + '\n';   // .npy 1.0: data 64-byte aligned
  const data = array.data;
  const body = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  const out = new Uint8Array(10 + header.length + body.length);
  out.set([0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 1, 0, header.length & 0xff, header.length >> 8]);
  out.set(new TextEncoder().encode(header), 10);
  out.set(body, 10 + header.length);
  return out;
}

let crcTable = null;

function crc32(bytes) {
  if (!crcTable) {
    crcTable = new Uint32Array(256);
    for (let n = 0; n < 256; n++) {
      let c = n;
      for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
      crcTable[n] = c >>> 0;
    }
  }
  let c = 0xffffffff;
  for (let i = 0; i < bytes.length; i++) c = crcTable[(c ^ bytes[i]) & 0xff] ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}
