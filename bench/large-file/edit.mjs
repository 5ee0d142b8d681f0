// Writes 2 KB of new random bytes in place near the middle of a file (bench/peers' step 2).
//   node edit.mjs FILE
import crypto from 'node:crypto';
import fs from 'node:fs';

const file = process.argv[2];
const size = fs.statSync(file).size;
const fd = fs.openSync(file, 'r+');
fs.writeSync(fd, crypto.randomBytes(2048), 0, 2048, Math.floor(size / 2) - 1024 + crypto.randomInt(4096));
fs.closeSync(fd);
