/** The chunking and hashing flags of `chunk`, `push` and `pull`, and what they give. */
import { ALGO_NAMES, type ChunkParams, DEFAULT_ALGO, DEFAULT_PARAMS, FpOp, algoByName, checkParams } from '../shared/src/wire/protocol.ts';
import { type Opts, UsageError, type Values, intFlag, str } from './command.ts';
import { FileKnown } from './known.ts';
import { KEEP_MAX } from '../shared/src/base/limits.ts';

/** --op's names of the FastFp operations */
const OPS: Record<string, number> = { xor: FpOp.Xor, add: FpOp.Add };
const opName = (code: number) => Object.keys(OPS).find((k) => OPS[k] === code)!;

export const CHUNK_OPTS: Opts = {
  min: { type: 'string', arg: 'N', help: `smallest chunk, bytes (default ${DEFAULT_PARAMS.min})` },
  avg: { type: 'string', arg: 'N', help: `average chunk, bytes (default ${DEFAULT_PARAMS.avg})` },
  max: { type: 'string', arg: 'N', help: `largest chunk, bytes (default ${DEFAULT_PARAMS.max})` },
  op: { type: 'string', arg: 'xor|add', help: `FastFp combining operation (default ${opName(DEFAULT_PARAMS.op)})` },
  every: { type: 'string', arg: '8|16|32', help: `FastFp samples every Nth byte (default ${DEFAULT_PARAMS.every})` },
};

export const SYNC_OPTS: Opts = {
  ...CHUNK_OPTS,
  algo: { type: 'string', arg: 'blake3|sha256|sha1', help: `strong hash (default ${ALGO_NAMES[DEFAULT_ALGO]})` },
  'no-known': { type: 'boolean', help: 'do not use or keep the chunk index of the version last synced, nor the record of uploads not seen stored' },
  'keep-max': { type: 'string', arg: 'BYTES', help: `keep the bytes of the versions pushed last, up to this many in all, and send edits of them as byte-exact deltas (0: keep none; default ${KEEP_MAX})` },
};

export function chunkParams(values: Values): ChunkParams {
  const name = str(values, 'op') ?? opName(DEFAULT_PARAMS.op);
  if (!Object.hasOwn(OPS, name)) throw new UsageError(`--op must be ${Object.keys(OPS).join(' or ')}`);
  const p = {
    min: intFlag(values, 'min', DEFAULT_PARAMS.min, 1),
    avg: intFlag(values, 'avg', DEFAULT_PARAMS.avg, 1),
    max: intFlag(values, 'max', DEFAULT_PARAMS.max, 1),
    op: OPS[name],
    every: intFlag(values, 'every', DEFAULT_PARAMS.every, 1),
  };
  try {
    checkParams(p);
  } catch (e) {
    throw new UsageError((e as Error).message);
  }
  return p;
}

export function algoOf(values: Values): number {
  const name = str(values, 'algo');
  if (name === undefined) return DEFAULT_ALGO;
  try {
    return algoByName(name);
  } catch (e) {
    throw new UsageError((e as Error).message);
  }
}

/** The on-disk known versions (cli/known.ts), unless --no-known. */
export const knownOf = (values: Values) => (values['no-known'] ? undefined : new FileKnown(undefined, intFlag(values, 'keep-max', KEEP_MAX, 0)));
