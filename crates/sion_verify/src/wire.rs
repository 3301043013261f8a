//! The little-endian, length-prefixed byte layout shared by every canonical encoding here
//! (atoms, ledger transactions and headers, proof files): appending on one side, a cursor
//! that names the field it is reading on the other.

/// Why bytes could not be read as the expected layout.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// The bytes end inside this field.
    #[error("{0}: the encoding ends early")]
    Truncated(&'static str),
    /// This field's text is not UTF-8.
    #[error("{0}: is not UTF-8")]
    Utf8(&'static str),
    /// A field's value is not allowed: an unknown code, kind or flag, a length or count out of
    /// bounds, a varint not in its shortest form.
    #[error("{field}: {problem}")]
    Invalid {
        /// The field.
        field: &'static str,
        /// What is wrong with it.
        problem: String,
    },
    /// This many bytes follow the last field.
    #[error("{0} bytes follow the end of the encoding")]
    Trailing(usize),
}

/// Appending fixed-width little-endian integers and length-prefixed data.
pub trait Put {
    /// One byte.
    fn put_u8(&mut self, v: u8);
    /// Two bytes, little-endian.
    fn put_u16(&mut self, v: u16);
    /// Four bytes, little-endian.
    fn put_u32(&mut self, v: u32);
    /// Eight bytes, little-endian.
    fn put_u64(&mut self, v: u64);
    /// Eight bytes, little-endian two's complement.
    fn put_i64(&mut self, v: i64);
    /// The bytes as they are, with no length.
    fn put_bytes(&mut self, v: &[u8]);
    /// u8 length, then the bytes; the caller has checked the length fits.
    fn put_str8(&mut self, s: &str);
    /// u16 length, then the bytes; the caller has checked the length fits.
    fn put_str16(&mut self, s: &str);
    /// u32 length, then the bytes; the caller has checked the length fits.
    fn put_bytes32(&mut self, b: &[u8]);
    /// LEB128: seven bits a byte, least significant first, the high bit set on all but the last.
    fn put_varint(&mut self, v: u64);
    /// A LEB128 varint of up to 128 bits (at most 19 bytes).
    fn put_varint128(&mut self, v: u128);
    /// A signed value as a varint of its zigzag form (0, -1, 1, -2, … → 0, 1, 2, 3, …).
    fn put_zigzag(&mut self, v: i64) {
        self.put_varint(((v << 1) ^ (v >> 63)) as u64);
    }
}

impl Put for Vec<u8> {
    fn put_u8(&mut self, v: u8) {
        self.push(v);
    }
    fn put_u16(&mut self, v: u16) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn put_u32(&mut self, v: u32) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn put_u64(&mut self, v: u64) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn put_i64(&mut self, v: i64) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn put_bytes(&mut self, v: &[u8]) {
        self.extend_from_slice(v);
    }
    fn put_str8(&mut self, s: &str) {
        self.push(s.len() as u8);
        self.extend_from_slice(s.as_bytes());
    }
    fn put_str16(&mut self, s: &str) {
        self.put_u16(s.len() as u16);
        self.extend_from_slice(s.as_bytes());
    }
    fn put_bytes32(&mut self, b: &[u8]) {
        self.put_u32(b.len() as u32);
        self.extend_from_slice(b);
    }
    fn put_varint(&mut self, v: u64) {
        self.put_varint128(u128::from(v));
    }
    fn put_varint128(&mut self, mut v: u128) {
        while v >= 0x80 {
            self.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.push(v as u8);
    }
}

/// A cursor over bytes being decoded.
pub struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    /// A cursor at the start of `bytes`.
    pub fn new(bytes: &'a [u8]) -> Self {
        Self { rest: bytes }
    }

    /// The next `n` bytes. Every read fails with [`WireError::Truncated`] naming `field` if the
    /// bytes run out.
    pub fn take(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], WireError> {
        if self.rest.len() < n {
            return Err(WireError::Truncated(field));
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }

    /// The next `N` bytes.
    pub fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], WireError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N, field)?);
        Ok(a)
    }

    /// One byte.
    pub fn u8(&mut self, field: &'static str) -> Result<u8, WireError> {
        Ok(self.array::<1>(field)?[0])
    }

    /// A little-endian u16.
    pub fn u16(&mut self, field: &'static str) -> Result<u16, WireError> {
        Ok(u16::from_le_bytes(self.array(field)?))
    }

    /// A little-endian u32.
    pub fn u32(&mut self, field: &'static str) -> Result<u32, WireError> {
        Ok(u32::from_le_bytes(self.array(field)?))
    }

    /// A little-endian u64.
    pub fn u64(&mut self, field: &'static str) -> Result<u64, WireError> {
        Ok(u64::from_le_bytes(self.array(field)?))
    }

    /// A little-endian i64.
    pub fn i64(&mut self, field: &'static str) -> Result<i64, WireError> {
        Ok(i64::from_le_bytes(self.array(field)?))
    }

    /// 0 or 1.
    pub fn flag(&mut self, field: &'static str) -> Result<bool, WireError> {
        match self.u8(field)? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(WireError::Invalid { field, problem: format!("flag {v} is not 0 or 1") }),
        }
    }

    /// The next `n` bytes as UTF-8 text.
    pub fn utf8(&mut self, n: usize, field: &'static str) -> Result<String, WireError> {
        let bytes = self.take(n, field)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| WireError::Utf8(field))
    }

    /// A u8 length, then that many bytes of UTF-8.
    pub fn str8(&mut self, field: &'static str) -> Result<String, WireError> {
        let n = self.u8(field)?;
        self.utf8(n.into(), field)
    }

    /// A u16 length, then that many bytes of UTF-8.
    pub fn str16(&mut self, field: &'static str) -> Result<String, WireError> {
        let n = self.u16(field)?;
        self.utf8(n.into(), field)
    }

    /// u32 length then bytes, refusing lengths above `max` before allocating.
    pub fn bytes32(&mut self, max: usize, field: &'static str) -> Result<&'a [u8], WireError> {
        let n = self.u32(field)? as usize;
        if n > max {
            return Err(WireError::Invalid { field, problem: format!("{n} bytes, more than {max}") });
        }
        self.take(n, field)
    }

    /// A u16 count then that many items, each read by `item`.
    pub fn list16<T>(
        &mut self,
        field: &'static str,
        mut item: impl FnMut(&mut Self) -> Result<T, WireError>,
    ) -> Result<Vec<T>, WireError> {
        let n = self.u16(field)?;
        (0..n).map(|_| item(self)).collect()
    }

    /// A LEB128 varint in its one shortest form (a trailing zero byte or more than ten bytes
    /// is refused, so every value has exactly one encoding).
    pub fn varint(&mut self, field: &'static str) -> Result<u64, WireError> {
        // Most varints of a proof are one or two bytes: read them straight from the slice (a
        // range proof's walk is a third varints). Anything else takes the general path, which
        // refuses exactly what it always did.
        match *self.rest {
            [b, ..] if b < 0x80 => {
                self.rest = &self.rest[1..];
                Ok(u64::from(b))
            }
            [lo, hi, ..] if hi < 0x80 && hi != 0 => {
                self.rest = &self.rest[2..];
                Ok(u64::from(lo & 0x7f) | u64::from(hi) << 7)
            }
            // At most 64 bits: the value fits.
            _ => Ok(self.leb128(field, 64)? as u64),
        }
    }

    /// A LEB128 varint of up to 128 bits in its one shortest form (at most 19 bytes).
    pub fn varint128(&mut self, field: &'static str) -> Result<u128, WireError> {
        self.leb128(field, 128)
    }

    /// A LEB128 varint of at most `bits` bits (64 or 128), in its one shortest form: its last
    /// possible byte may hold only the bits left, and a trailing zero byte is refused.
    /// Read straight from the slice, which is consumed only on success (a box's differences
    /// in a proof, nanoseconds mostly, are five to seven bytes: a per-byte read was a tenth
    /// of a big proof's check).
    fn leb128(&mut self, field: &'static str, bits: u32) -> Result<u128, WireError> {
        let bytes = bits.div_ceil(7);
        let mut v = 0u128;
        for i in 0..bytes {
            let b = *self.rest.get(i as usize).ok_or(WireError::Truncated(field))?;
            if i + 1 == bytes && u32::from(b) >> (bits - 7 * i) != 0 {
                return Err(WireError::Invalid { field, problem: format!("varint overflows {bits} bits") });
            }
            v |= u128::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                if b == 0 && i > 0 {
                    return Err(WireError::Invalid {
                        field,
                        problem: "varint is not in its shortest form".into(),
                    });
                }
                self.rest = &self.rest[i as usize + 1..];
                return Ok(v);
            }
        }
        Err(WireError::Invalid { field, problem: format!("varint is longer than {bytes} bytes") })
    }

    /// A signed value as [`Put::put_zigzag`] writes it.
    pub fn zigzag(&mut self, field: &'static str) -> Result<i64, WireError> {
        let v = self.varint(field)?;
        Ok(((v >> 1) as i64) ^ -((v & 1) as i64))
    }

    /// How many bytes are left to read.
    pub fn remaining(&self) -> usize {
        self.rest.len()
    }

    /// Succeeds only if every byte was read.
    pub fn finish(self) -> Result<(), WireError> {
        match self.rest.len() {
            0 => Ok(()),
            n => Err(WireError::Trailing(n)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_and_have_one_form() {
        for v in [0u64, 1, 127, 128, 300, 1 << 35, u64::MAX] {
            let mut out = Vec::new();
            out.put_varint(v);
            let mut r = Reader::new(&out);
            assert_eq!(r.varint("v"), Ok(v));
            assert!(r.finish().is_ok());
        }
        for v in [0i64, -1, 1, i64::MIN, i64::MAX, -300] {
            let mut out = Vec::new();
            out.put_zigzag(v);
            assert_eq!(Reader::new(&out).zigzag("v"), Ok(v));
        }
        assert!(Reader::new(&[0x80, 0x00]).varint("v").is_err());
        assert!(Reader::new(&[0xff; 10]).varint("v").is_err());
        assert!(
            Reader::new(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02]).varint("v").is_err()
        );
    }

    /// `varint`'s short cuts for one and two bytes read and refuse exactly as the general
    /// reader does, and leave the same bytes unread: every input of one and two bytes, two-byte
    /// prefixes with five third bytes, and three- to eleven-byte varints with every byte at
    /// every place (their first bytes decide which path reads them).
    #[test]
    fn the_short_varint_path_agrees_with_the_general_one() {
        let mut inputs: Vec<Vec<u8>> = vec![vec![]];
        for a in 0..=255u8 {
            inputs.push(vec![a]);
            for b in 0..=255u8 {
                inputs.push(vec![a, b]);
                for c in [0x00, 0x01, 0x7f, 0x80, 0xff] {
                    inputs.push(vec![a, b, c]);
                }
            }
        }
        for len in 3..=11 {
            for at in 0..len {
                for b in 0..=255u8 {
                    let mut bytes = vec![0x80u8; len];
                    bytes[len - 1] = 0x01;
                    bytes[at] = b;
                    inputs.push(bytes);
                }
            }
        }
        for bytes in inputs {
            let (mut fast, mut general) = (Reader::new(&bytes), Reader::new(&bytes));
            let want = general.leb128("v", 64).map(|v| v as u64);
            assert_eq!(fast.varint("v"), want, "{bytes:02x?}");
            if want.is_ok() {
                assert_eq!(fast.remaining(), general.remaining(), "{bytes:02x?}");
            }
        }
    }
}
