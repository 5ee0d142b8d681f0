// Entry of a Node chunk worker thread (spans-node.ts): registers tsx's loader, which Node 20
// does not carry into worker threads, then runs the worker's side of that module.
import { register } from 'tsx/esm/api';

register();
const { serveSpansHere } = await import('./spans-node.ts');
serveSpansHere();
