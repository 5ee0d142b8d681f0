//! Adler-32 (RFC 1950), the weak hash of rsync and WebR2sync+. Here for the paper's Table II
//! comparison and for the WebR2sync+ baseline; Dsync itself uses FastFp.

const MOD: u32 = 65521;
/// Largest n such that 255 n (n + 1) / 2 + (n + 1) (MOD - 1) fits in u32 (zlib's NMAX).
const NMAX: usize = 5552;

pub fn adler32(data: &[u8]) -> u32 {
    let (mut a, mut b) = (1u32, 0u32);
    for block in data.chunks(NMAX) {
        for &x in block {
            a += x as u32;
            b += a;
        }
        a %= MOD;
        b %= MOD;
    }
    (b << 16) | a
}

/// Rolls an Adler-32 of a window of `len` bytes by one byte: `out` leaves, `inp` enters.
pub fn roll(sum: u32, len: usize, out: u8, inp: u8) -> u32 {
    let (a, b) = (sum & 0xffff, sum >> 16);
    let a2 = (a + MOD - out as u32 + inp as u32) % MOD;
    let b2 = ((b as u64 + MOD as u64 * 1024 - (len as u64 * out as u64) % MOD as u64 + a2 as u64 - 1)
        % MOD as u64) as u32;
    (b2 << 16) | a2
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_value() {
        assert_eq!(adler32(b"Wikipedia"), 0x11E6_0398);
        assert_eq!(adler32(b""), 1);
    }

    #[test]
    fn rolling_equals_direct() {
        let data: Vec<u8> = (0..20000u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
        let w = 700;
        let mut s = adler32(&data[..w]);
        for i in 1..data.len() - w {
            s = roll(s, w, data[i - 1], data[i + w - 1]);
            assert_eq!(s, adler32(&data[i..i + w]), "at {i}");
        }
    }
}
