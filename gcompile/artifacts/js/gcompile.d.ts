// Types of gcompile.mjs (written by `gcompile build --target web`; docs/web.md).
import type * as ortTypes from 'onnxruntime-common';

/** The onnxruntime-web or onnxruntime-node module (`import * as ort from 'onnxruntime-web'`). */
export type Ort = typeof ortTypes;
export type Tensor = ortTypes.Tensor;
export type DType = 'float32' | 'float64' | 'float16' | 'int64' | 'int32' | 'int16' | 'int8' | 'uint8' | 'bool';
/** A value for a model input: an ort.Tensor, or data and dims (numbers are converted to the input's dtype). */
export type TensorLike = Tensor | {data: ArrayLike<number> | ArrayLike<bigint>; dims: readonly number[]};
/** An array as readNpz gives it, which `new ort.Tensor(type, data, dims)` takes. */
export interface NpzArray {type: DType; dims: number[]; data: Tensor['data']}

/** One input or output in manifest.json: a symbolic dim is a string ("batch"). */
export interface Signature {name: string; dtype: DType; shape: (number | string)[]}

/** A training step's names (manifest.json "train_step"; gcompile.training.layout.StepLayout). */
export interface StepLayout {
  params: string[];
  buffers: string[];
  /** [slot name, its parameter, initial value] */
  state: [string, string, number][];
  /** [name, default value, dtype] */
  hyperparams: [string, number, DType][];
  batch: string[];
  aux: string[];
  /** the step leaves everything unchanged when its loss or a gradient is not finite (output "skipped") */
  skip_nonfinite?: boolean;
  outputs: string[];
}

export interface ManifestEntry {
  name: string;
  file: string;
  sha256: string;
  inputs: Signature[];
  outputs: Signature[];
  target: string;
  train_step?: StepLayout;
  /** the training step's starting parameters and buffers (a state dict .npz) */
  init?: string;
  external_data?: {file: string; bytes: number; sha256: string};
  [key: string]: unknown;
}

export interface Manifest {
  gcompile_version: string;
  source: string;
  artifacts: ManifestEntry[];
  web?: {module: string; types: string};
}

export type Read = (file: string) => Promise<Uint8Array>;

export interface OpenOptions {
  /** how to read a file of the build (default: fetch, or the file system in Node.js) */
  read?: Read;
}

export interface TrainerOptions {
  sessionOptions?: ortTypes.InferenceSession.SessionOptions;
  /** .npz bytes to start from instead of <name>.init.npz: a state dict, or a checkpoint (it has "step") */
  state?: Uint8Array | ArrayBuffer;
  /** keep the carried state where the provider computes it, e.g. 'gpu-buffer' with WebGPU */
  keepState?: ortTypes.Tensor.DataLocation;
}

/** Open the build folder `where` (a URL, or a path in Node.js) written by `gcompile build --target web`. */
export function openBuild(ort: Ort, where: string | URL, options?: OpenOptions): Promise<Build>;

export class Build {
  readonly ort: Ort;
  readonly manifest: Manifest;
  readonly read: Read;
  artifact(name: string): ManifestEntry;
  /** A session of the artifact, its bytes checked against the manifest's sha256 where WebCrypto is available. */
  session(name: string, sessionOptions?: ortTypes.InferenceSession.SessionOptions): Promise<ortTypes.InferenceSession>;
  trainer(name: string, options?: TrainerOptions): Promise<Trainer>;
  model(name: string, options?: {sessionOptions?: ortTypes.InferenceSession.SessionOptions}): Promise<Model>;
}

export type Hyper = number | ((stepsTaken: number) => number);

export class Trainer {
  readonly session: ortTypes.InferenceSession;
  readonly entry: ManifestEntry;
  readonly layout: StepLayout;
  /** hyper-parameter values or schedules fed at every step (default: the values exported) */
  hyperparams: Record<string, Hyper>;
  /** the last step's auxiliary outputs (a has_aux loss's metrics) */
  readonly aux: Record<string, Tensor>;
  /** steps applied so far */
  readonly stepCount: number;
  /** steps skipped because their loss or a gradient was not finite (skip_nonfinite), since this Trainer was made */
  readonly skippedSteps: number;
  /** parameters, buffers, optimizer state and "step": the names carried from step to step */
  readonly carried: string[];
  /** One step; returns the loss computed before the update. Hyper-parameters given here hold for this step. */
  step(batch: Record<string, TensorLike> | TensorLike[], hyperparams?: Record<string, Hyper>): Promise<number>;
  /** Current values, copied to the CPU. */
  values(names?: string[]): Promise<Record<string, Tensor>>;
  /** Parameters and buffers by name. */
  stateDict(): Promise<Record<string, Tensor>>;
  /** .npz bytes for a gc.nn module's load_state_dict (or Trainer(path, params=...)). */
  exportStateDict(): Promise<Uint8Array>;
  /** .npz bytes for gc.runtime.Trainer.load. */
  exportCheckpoint(): Promise<Uint8Array>;
  /** Resume from Trainer.save's .npz (or exportCheckpoint's). */
  importCheckpoint(source: Uint8Array | ArrayBuffer | Record<string, NpzArray | Tensor>): Promise<void>;
  /** Start from parameters and buffers; the optimizer state and step counter start afresh. */
  importStateDict(source: Uint8Array | ArrayBuffer | Record<string, NpzArray | Tensor>): Promise<void>;
  release(): Promise<void>;
}

export class Model {
  readonly session: ortTypes.InferenceSession;
  readonly entry: ManifestEntry;
  readonly inputs: Signature[];
  readonly outputs: Signature[];
  readonly bound: Record<string, Tensor>;
  /** Feed `values` to the inputs `prefix + name` on every run. */
  bind(values: Record<string, TensorLike>, prefix?: string): this;
  /** Run with `feeds` and the bound inputs; the outputs by name. */
  run(feeds?: Record<string, TensorLike>): Promise<Record<string, Tensor>>;
  release(): Promise<void>;
}

/** The typed array of each tensor type (ort.Tensor's data; bool as bytes). */
export const ARRAYS: Record<DType, {new (buffer: ArrayBufferLike, byteOffset?: number, length?: number): Tensor['data']; BYTES_PER_ELEMENT: number}>;
export function readNpz(source: Uint8Array | ArrayBuffer): Promise<Record<string, NpzArray>>;
export function writeNpz(arrays: Record<string, Tensor | NpzArray>): Uint8Array;
