// DrainRate (shared/src/transport/drain-rate.ts): the pace at which a socket sends what it buffered,
// from samples of its buffer, counting only the times it held bytes throughout.
import assert from 'node:assert/strict';
import test from 'node:test';
import { DrainRate } from '../src/transport/drain-rate.ts';

test('a socket that holds bytes throughout: the rate is the pace it drains at', () => {
  for (const pace of [0.5, 8, 100, 5000]) {
    const r = new DrainRate();
    let sent = 0;
    let buffered = 0;
    for (let t = 0; t <= 2000; t += 4) {
      // a sender that keeps it full: tops it up to 1 MB, then it drains at `pace` per ms
      sent += 1e6 - buffered;
      buffered = 1e6;
      r.see(sent, buffered, t);
      buffered -= Math.min(buffered - 1, pace * 4);
    }
    assert.ok(Math.abs(r.rate()! - pace) / pace < 0.01, `pace ${pace}: ${r.rate()}`);
  }
});

test('bursts that leave before the next sample are no slow wire: the rate cannot tell', () => {
  const r = new DrainRate();
  let sent = 0;
  for (let t = 0; t <= 2000; t += 4) {
    sent += 64 << 10;
    r.see(sent, 64 << 10, t); // handed over...
    r.see(sent, 0, t + 1); // ...and gone a millisecond later
  }
  assert.equal(r.rate(), null);
});

test('until it held bytes for 50 ms, null; times it stood empty do not count', () => {
  const r = new DrainRate();
  r.see(1000, 1000, 0);
  r.see(1000, 500, 40);
  assert.equal(r.rate(), null);
  r.see(1000, 0, 45);
  r.see(1000, 0, 5000); // empty for seconds
  r.see(2000, 1000, 5001);
  r.see(2000, 800, 5021);
  // counted: 500 B in 40 ms, then 200 B in 20 ms, the first decayed by those 20 ms
  const d = Math.exp(-20 / 1000);
  assert.ok(Math.abs(r.rate()! - (500 * d + 200) / (40 * d + 20)) < 1e-9, `${r.rate()}`);
});
