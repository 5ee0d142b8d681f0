/** What the benchmark (run.ts) records per file pair and the report (report.ts) reads. */
import type { Report } from '../approaches/approach.ts';

export interface RsyncRun {
  timeMs: number;
  sent: number;
  received: number;
  literal: number;
  matched: number;
}
export interface PairResult {
  section: string;
  pair: string;
  basisSize: number;
  targetSize: number;
  shaping: string;
  kind?: string;
  modSize?: number;
  ratio?: number;
  runs: Record<string, Report[]>;
  rsync?: RsyncRun[];
  /** what a sync of the pair costs elsewhere, computed once per pair (run.ts `floors`): the
   *  bytes of `zstd -3 --long=27 --patch-from=BASIS TARGET`, the delta a compressor holding both
   *  versions sends; and `rsync -z`'s bytes sent + received (both directions) */
  floors?: { zstdPatch: number; rsyncZ?: number };
  /** Fig. 11: Dsync's Match Tokens as sent (merged) and as one token per matched chunk */
  merging?: Record<string, { tokens: number; matchedChunks: number; mergedTokenBytes: number; unmergedTokenBytes: number }>;
}
