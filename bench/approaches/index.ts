/** Every approach the benchmark compares, in the order of its tables. */
import type { Approach } from './approach.ts';
import { dedup } from './dedup.ts';
import { dsync } from './dsync.ts';
import { dsyncKept } from './dsync-kept.ts';
import { dsyncKnown } from './dsync-known.ts';
import { dsyncPaper } from './dsync-paper.ts';
import { full } from './full.ts';
import { webr2sync } from './webr2sync.ts';

export const REGISTRY: readonly Approach[] = [dsync, dsyncKnown, dsyncKept, dsyncPaper, webr2sync, dedup, full];
export const APPROACHES: readonly string[] = REGISTRY.map((a) => a.name);

/** The approach of this name (an unknown name is an error). */
export function approachOf(name: string): Approach {
  const a = REGISTRY.find((x) => x.name === name);
  if (!a) throw new Error(`unknown approach ${name}: one of ${APPROACHES.join(', ')}`);
  return a;
}

/** Whether the approach runs against `dsync serve` (either mode). */
export const isDsync = (name: string) => approachOf(name).server !== 'baselines';
