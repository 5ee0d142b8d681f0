/** `dsync chunk FILE`: the file's FastCDC cut points, one chunk a line: offset, length, FastFp. */
import { promises as fs } from 'node:fs';
import '../../shared/src/chunking/wasm.ts';
import { DsyncChunker } from '../../shared/src/chunking/wasm.ts';
import { READ_SLICE } from '../../shared/src/chunking/chunk-index.ts';
import type { Command } from '../command.ts';
import { CHUNK_OPTS, chunkParams } from '../sync-options.ts';

export const command: Command = {
  usage: 'chunk FILE [--min N --avg N --max N] [--op xor|add] [--every 8|16|32]',
  about: 'Prints the chunks FastCDC cuts FILE into, one a line: offset, length and the FastFp of\nthe chunk (hex). Streams: any size of file.',
  options: CHUNK_OPTS,
  positionals: [1, 1],
  async run(values, [file]) {
    const p = chunkParams(values);
    const fh = await fs.open(file, 'r');
    const chunker = new DsyncChunker(p.min, p.avg, p.max, p.op, p.every, 0);
    const buf = Buffer.allocUnsafe(READ_SLICE);
    let offset = 0;
    const out = async () => {
      const pairs = chunker.take_chunks();
      let s = '';
      for (let i = 0; i < pairs.length; i += 2) {
        s += `${offset} ${pairs[i]} ${pairs[i + 1].toString(16).padStart(8, '0')}\n`;
        offset += pairs[i];
      }
      if (s && !process.stdout.write(s)) await new Promise((r) => process.stdout.once('drain', r));
    };
    try {
      for (;;) {
        const { bytesRead } = await fh.read(buf, 0, buf.length, null);
        if (bytesRead === 0) break;
        chunker.push(buf.subarray(0, bytesRead));
        await out();
      }
      chunker.finish();
      await out();
    } finally {
      chunker.free();
      await fh.close();
    }
  },
};
