/** Messages between the page and the sync worker (client/src/worker.ts). */
import type { Phase, SyncReport } from '../../shared/src/sync-client.ts';

export type ToWorker =
  | { kind: 'push'; id: number; file: File; name: string; url: string; retries: number }
  | { kind: 'pull'; id: number; name: string; version: number; basis: File | null; url: string };

export type FromWorker =
  | { kind: 'progress'; id: number; phase: Phase; done?: number; total?: number }
  | { kind: 'done'; id: number; report: SyncReport; blob?: Blob }
  | { kind: 'error'; id: number; message: string; code?: number; lost: boolean };
