/**
 * `dsync-paper`: Dsync as the paper has it — SHA-1, and a server that chunks and hashes its
 * basis on every sync (`dsync serve --paper-exact`), no refinement.
 */
import { Algo } from '../../shared/src/wire/protocol.ts';
import type { Approach } from './approach.ts';
import { threePhases } from './dsync.ts';

export const dsyncPaper: Approach = threePhases('dsync-paper', 'dsync-paper', Algo.Sha1);
