// Entry of a Node hash worker thread (hash-workers-node.ts): registers tsx's loader, which
// Node 20 does not carry into worker threads, then runs the worker's side of that module.
import { register } from 'tsx/esm/api';

register();
const { serveHashesHere } = await import('./hash-workers-node.ts');
serveHashesHere();
