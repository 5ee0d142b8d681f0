/** The chunking and hashing flags of `chunk`, `push` and `pull`, and what they give. */
import { type ChunkParams, DEFAULT_ALGO, DEFAULT_PARAMS, FpOp, algoByName, checkParams } from '../shared/src/protocol.ts';
import { type Opts, UsageError, type Values, intFlag, str } from './command.ts';
import { FileKnown } from './known.ts';
import { KEEP_MAX } from '../shared/src/limits.ts';

export const CHUNK_OPTS: Opts = {
  min: { type: 'string', arg: 'N', help: `smallest chunk, bytes (default ${DEFAULT_PARAMS.min})` },
  avg: { type: 'string', arg: 'N', help: `average chunk, bytes (default ${DEFAULT_PARAMS.avg})` },
  max: { type: 'string', arg: 'N', help: `largest chunk, bytes (default ${DEFAULT_PARAMS.max})` },
  op: { type: 'string', arg: 'xor|add', help: 'FastFp combining operation (default xor)' },
  every: { type: 'string', arg: '8|16|32', help: `FastFp samples every Nth byte (default ${DEFAULT_PARAMS.every})` },
};

export const SYNC_OPTS: Opts = {
  ...CHUNK_OPTS,
  algo: { type: 'string', arg: 'blake3|sha256|sha1', help: 'strong hash (default blake3)' },
  retries: { type: 'string', arg: 'N', help: 'reconnect this many times after a lost connection (default 3)' },
  'no-known': { type: 'boolean', help: 'do not use or keep the chunk index of the version last synced' },
  'keep-max': { type: 'string', arg: 'BYTES', help: `keep the bytes of the versions pushed last, up to this many in all, and send edits of them as byte-exact deltas (default ${KEEP_MAX}; 0: keep none)` },
};

export function chunkParams(values: Values): ChunkParams {
  const op = str(values, 'op') ?? 'xor';
  if (op !== 'xor' && op !== 'add') throw new UsageError('--op must be xor or add');
  const p = {
    min: intFlag(values, 'min', DEFAULT_PARAMS.min, 1),
    avg: intFlag(values, 'avg', DEFAULT_PARAMS.avg, 1),
    max: intFlag(values, 'max', DEFAULT_PARAMS.max, 1),
    op: op === 'xor' ? FpOp.Xor : FpOp.Add,
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
