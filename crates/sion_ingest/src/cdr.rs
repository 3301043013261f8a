//! The ROS 2 wire form of a message: OMG CDR (XCDR1, "plain" encoding), as Fast DDS sends it and
//! MCAP bags store it. A 4-byte encapsulation header says the byte order (`00 01` little
//! endian, `00 00` big endian); every primitive then sits at an offset, counted from the end of
//! that header, that is a multiple of its size (at most 8). Strings are a `u32` length that
//! counts a closing NUL, the bytes and the NUL; sequences a `u32` count and the elements;
//! fixed arrays just the elements.
//!
//! Hand-written rather than serde-driven so that a 1 MB image borrows its pixels instead of
//! visiting them one by one, and so that every malformed input is a typed error.

/// Why bytes are not the message they claim to be.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CdrError {
    #[error("the encapsulation header is missing or names an encoding other than plain CDR")]
    Encapsulation,
    #[error("the message ends early (needed {needed} bytes at offset {at})")]
    Truncated { at: usize, needed: usize },
    #[error("a string at offset {at} is not NUL-terminated UTF-8")]
    BadString { at: usize },
    #[error("a bool at offset {at} is neither 0 nor 1")]
    BadBool { at: usize },
}

const HEADER_LE: [u8; 4] = [0, 1, 0, 0];

/// Reads one message; borrows strings and byte sequences from the input.
pub struct Reader<'a> {
    body: &'a [u8],
    at: usize,
    little_endian: bool,
}

macro_rules! read_primitive {
    ($name:ident, $t:ty) => {
        pub fn $name(&mut self) -> Result<$t, CdrError> {
            const N: usize = std::mem::size_of::<$t>();
            self.align(N)?;
            let bytes: [u8; N] = self.take(N)?.try_into().map_err(|_| self.truncated(N))?;
            Ok(if self.little_endian { <$t>::from_le_bytes(bytes) } else { <$t>::from_be_bytes(bytes) })
        }
    };
}

impl<'a> Reader<'a> {
    pub fn new(message: &'a [u8]) -> Result<Self, CdrError> {
        let (header, body) = message.split_at_checked(4).ok_or(CdrError::Encapsulation)?;
        // The last two header bytes are options (alignment padding of the tail); ignore them.
        let little_endian = match [header[0], header[1]] {
            [0, 1] => true,
            [0, 0] => false,
            _ => return Err(CdrError::Encapsulation),
        };
        Ok(Self { body, at: 0, little_endian })
    }

    fn truncated(&self, needed: usize) -> CdrError {
        CdrError::Truncated { at: self.at, needed }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], CdrError> {
        let end = self.at.checked_add(n).filter(|&end| end <= self.body.len()).ok_or(self.truncated(n))?;
        let bytes = &self.body[self.at..end];
        self.at = end;
        Ok(bytes)
    }

    fn align(&mut self, n: usize) -> Result<(), CdrError> {
        let pad = (n - self.at % n) % n;
        self.take(pad).map(|_| ())
    }

    read_primitive!(u8, u8);
    read_primitive!(i8, i8);
    read_primitive!(u16, u16);
    read_primitive!(u32, u32);
    read_primitive!(i32, i32);
    read_primitive!(f32, f32);
    read_primitive!(f64, f64);

    pub fn bool(&mut self) -> Result<bool, CdrError> {
        let at = self.at;
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(CdrError::BadBool { at }),
        }
    }

    pub fn string(&mut self) -> Result<&'a str, CdrError> {
        let len = self.u32()? as usize;
        let at = self.at;
        let bytes = self.take(len)?;
        match bytes.split_last() {
            Some((0, text)) => std::str::from_utf8(text).map_err(|_| CdrError::BadString { at }),
            // Some writers send an empty string as length 0.
            None => Ok(""),
            Some(_) => Err(CdrError::BadString { at }),
        }
    }

    /// A `uint8[]` or `int8[]` sequence, borrowed.
    pub fn bytes(&mut self) -> Result<&'a [u8], CdrError> {
        let len = self.u32()? as usize;
        self.take(len)
    }

    /// A sequence of `f64`.
    pub fn f64_seq(&mut self) -> Result<Vec<f64>, CdrError> {
        let len = self.u32()? as usize;
        // Refuse a count the remaining bytes cannot hold before allocating for it.
        if len.saturating_mul(8) > self.body.len().saturating_sub(self.at) {
            return Err(self.truncated(len.saturating_mul(8)));
        }
        (0..len).map(|_| self.f64()).collect()
    }

    /// A sequence of `f32` (a laser scan's ranges).
    pub fn f32_seq(&mut self) -> Result<Vec<f32>, CdrError> {
        let len = self.u32()? as usize;
        if len.saturating_mul(4) > self.body.len().saturating_sub(self.at) {
            return Err(self.truncated(len.saturating_mul(4)));
        }
        (0..len).map(|_| self.f32()).collect()
    }

    pub fn f64_array<const N: usize>(&mut self) -> Result<[f64; N], CdrError> {
        let mut out = [0.0; N];
        for x in &mut out {
            *x = self.f64()?;
        }
        Ok(out)
    }

    /// The count of a sequence of structures, refused when even one byte per element would not
    /// fit in what remains.
    pub fn seq_len(&mut self) -> Result<usize, CdrError> {
        let len = self.u32()? as usize;
        if len > self.body.len().saturating_sub(self.at) {
            return Err(self.truncated(len));
        }
        Ok(len)
    }
}

/// Writes one message, little endian.
pub struct Writer {
    out: Vec<u8>,
}

macro_rules! write_primitive {
    ($name:ident, $t:ty) => {
        pub fn $name(&mut self, v: $t) {
            self.align(std::mem::size_of::<$t>());
            self.out.extend_from_slice(&v.to_le_bytes());
        }
    };
}

impl Default for Writer {
    fn default() -> Self {
        Self::new()
    }
}

impl Writer {
    pub fn new() -> Self {
        Self { out: HEADER_LE.to_vec() }
    }

    fn align(&mut self, n: usize) {
        let at = self.out.len() - 4;
        self.out.resize(self.out.len() + (n - at % n) % n, 0);
    }

    write_primitive!(u8, u8);
    write_primitive!(i8, i8);
    write_primitive!(u16, u16);
    write_primitive!(u32, u32);
    write_primitive!(i32, i32);
    write_primitive!(f32, f32);
    write_primitive!(f64, f64);

    pub fn bool(&mut self, v: bool) {
        self.u8(u8::from(v));
    }

    pub fn string(&mut self, s: &str) {
        self.u32(len32(s.len() + 1));
        self.out.extend_from_slice(s.as_bytes());
        self.out.push(0);
    }

    pub fn bytes(&mut self, b: &[u8]) {
        self.u32(len32(b.len()));
        self.out.extend_from_slice(b);
    }

    pub fn f64_seq(&mut self, xs: &[f64]) {
        self.u32(len32(xs.len()));
        self.f64_array(xs);
    }

    pub fn f32_seq(&mut self, xs: &[f32]) {
        self.u32(len32(xs.len()));
        for &x in xs {
            self.f32(x);
        }
    }

    pub fn f64_array(&mut self, xs: &[f64]) {
        for &x in xs {
            self.f64(x);
        }
    }

    pub fn seq_len(&mut self, n: usize) {
        self.u32(len32(n));
    }

    pub fn finish(self) -> Vec<u8> {
        self.out
    }
}

/// CDR lengths are 32-bit; a longer sequence cannot be a ROS message, so saturate (the reader
/// will then refuse the message as truncated rather than misread it).
fn len32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// A value with a CDR form: a primitive, a string, a sequence or a message structure.
pub trait Cdr: Sized {
    fn read(r: &mut Reader<'_>) -> Result<Self, CdrError>;
    fn write(&self, w: &mut Writer);
}

/// A whole message: a structure with a ROS 2 type name.
pub trait Message: Cdr {
    /// The ROS 2 type name, e.g. `geometry_msgs/msg/PoseStamped`.
    const TYPE: &'static str;

    fn from_cdr(message: &[u8]) -> Result<Self, CdrError> {
        Self::read(&mut Reader::new(message)?)
    }

    fn to_cdr(&self) -> Vec<u8> {
        let mut w = Writer::new();
        self.write(&mut w);
        w.finish()
    }
}

macro_rules! cdr_primitive {
    ($($t:ident),*) => {$(
        impl Cdr for $t {
            fn read(r: &mut Reader<'_>) -> Result<Self, CdrError> {
                r.$t()
            }
            fn write(&self, w: &mut Writer) {
                w.$t(*self)
            }
        }
    )*};
}
cdr_primitive!(u8, i8, u16, u32, i32, f32, f64, bool);

impl Cdr for String {
    fn read(r: &mut Reader<'_>) -> Result<Self, CdrError> {
        r.string().map(str::to_owned)
    }
    fn write(&self, w: &mut Writer) {
        w.string(self)
    }
}

impl Cdr for Vec<u8> {
    fn read(r: &mut Reader<'_>) -> Result<Self, CdrError> {
        r.bytes().map(<[u8]>::to_vec)
    }
    fn write(&self, w: &mut Writer) {
        w.bytes(self)
    }
}

impl Cdr for Vec<i8> {
    fn read(r: &mut Reader<'_>) -> Result<Self, CdrError> {
        Ok(r.bytes()?.iter().map(|&b| b as i8).collect())
    }
    fn write(&self, w: &mut Writer) {
        w.seq_len(self.len());
        w.out.extend(self.iter().map(|&v| v as u8));
    }
}

impl Cdr for Vec<f64> {
    fn read(r: &mut Reader<'_>) -> Result<Self, CdrError> {
        r.f64_seq()
    }
    fn write(&self, w: &mut Writer) {
        w.f64_seq(self)
    }
}

impl Cdr for Vec<f32> {
    fn read(r: &mut Reader<'_>) -> Result<Self, CdrError> {
        r.f32_seq()
    }
    fn write(&self, w: &mut Writer) {
        w.f32_seq(self)
    }
}

impl<const N: usize> Cdr for [f64; N] {
    fn read(r: &mut Reader<'_>) -> Result<Self, CdrError> {
        r.f64_array()
    }
    fn write(&self, w: &mut Writer) {
        w.f64_array(self)
    }
}

/// A structure whose CDR form is its fields in order.
macro_rules! cdr_struct {
    ($(#[$meta:meta])* pub struct $name:ident { $($(#[$fmeta:meta])* pub $field:ident: $t:ty,)* }) => {
        $(#[$meta])*
        pub struct $name { $($(#[$fmeta])* pub $field: $t,)* }

        impl $crate::cdr::Cdr for $name {
            fn read(r: &mut $crate::cdr::Reader<'_>) -> Result<Self, $crate::cdr::CdrError> {
                // Struct expressions evaluate their fields in the order written: the wire order.
                Ok(Self { $($field: $crate::cdr::Cdr::read(r)?,)* })
            }
            fn write(&self, w: &mut $crate::cdr::Writer) {
                $($crate::cdr::Cdr::write(&self.$field, w);)*
            }
        }
    };
}
pub(crate) use cdr_struct;

/// A sequence of structures: its count (refused when the rest of the message cannot hold it),
/// then each.
macro_rules! cdr_seq {
    ($($t:ty),*) => {$(
        impl $crate::cdr::Cdr for Vec<$t> {
            fn read(r: &mut $crate::cdr::Reader<'_>) -> Result<Self, $crate::cdr::CdrError> {
                let n = r.seq_len()?;
                (0..n).map(|_| <$t as $crate::cdr::Cdr>::read(r)).collect()
            }
            fn write(&self, w: &mut $crate::cdr::Writer) {
                w.seq_len(self.len());
                self.iter().for_each(|t| $crate::cdr::Cdr::write(t, w));
            }
        }
    )*};
}
pub(crate) use cdr_seq;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn primitives_align_from_the_end_of_the_header() {
        let mut w = Writer::new();
        w.u8(7);
        w.f64(1.5);
        w.string("map");
        w.i32(-2);
        let bytes = w.finish();
        // header, u8, 7 bytes of padding, f64, u32 length 4, "map\0", i32
        assert_eq!(bytes.len(), 4 + 1 + 7 + 8 + 4 + 4 + 4);
        let mut r = Reader::new(&bytes).unwrap();
        assert_eq!(r.u8(), Ok(7));
        assert_eq!(r.f64(), Ok(1.5));
        assert_eq!(r.string(), Ok("map"));
        assert_eq!(r.i32(), Ok(-2));
        assert!(matches!(r.u8(), Err(CdrError::Truncated { .. })));
    }

    #[test]
    fn big_endian_messages_read_too() {
        let bytes = [0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 2, b'a', 0];
        let mut r = Reader::new(&bytes).unwrap();
        assert_eq!(r.u32(), Ok(5));
        assert_eq!(r.string(), Ok("a"));
    }

    #[test]
    fn malformed_input_is_an_error_not_a_panic() {
        assert_eq!(Reader::new(&[0, 1]).err(), Some(CdrError::Encapsulation));
        assert_eq!(Reader::new(&[1, 1, 0, 0]).err(), Some(CdrError::Encapsulation));
        // A string without its NUL, a string longer than the message, a huge sequence count.
        let mut r = Reader::new(&[0, 1, 0, 0, 2, 0, 0, 0, b'a', b'b']).unwrap();
        assert!(matches!(r.string(), Err(CdrError::BadString { .. })));
        let mut r = Reader::new(&[0, 1, 0, 0, 9, 0, 0, 0, b'a', 0]).unwrap();
        assert!(matches!(r.string(), Err(CdrError::Truncated { .. })));
        let mut r = Reader::new(&[0, 1, 0, 0, 255, 255, 255, 255]).unwrap();
        assert!(matches!(r.f64_seq(), Err(CdrError::Truncated { .. })));
        let mut r = Reader::new(&[0, 1, 0, 0, 255, 255, 255, 255]).unwrap();
        assert!(matches!(r.seq_len(), Err(CdrError::Truncated { .. })));
        let mut r = Reader::new(&[0, 1, 0, 0, 2]).unwrap();
        assert!(matches!(r.bool(), Err(CdrError::BadBool { .. })));
    }
}
