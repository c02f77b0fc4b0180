//! PostgreSQL's `numeric` on-disk format turned into `numeric_out`'s text,
//! without an fmgr call or a palloc (pure code).
//!
//! Layout (PostgreSQL's numeric.c): after the varlena length word comes a
//! 16-bit header. Short form (`0x8000` set, `0x4000` clear): sign bit
//! `0x2000`, display scale in bits `0x1F80`, weight sign `0x0040` and weight
//! `0x003F`, then the digits. Long form: sign in the top two bits (`0x0000`
//! positive, `0x4000` negative) and display scale in the low 14 bits, then a
//! 16-bit weight, then the digits. Special values have `0xC000` set: NaN
//! `0xC000`, +Infinity `0xD000`, -Infinity `0xF000`. Digits are base 10000,
//! the first one worth 10000^weight.

use crate::text::json::DIGIT_PAIRS;

const NBASE_DIGITS: usize = 4;

/// What [`numeric_text`] wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NumericKind {
    Finite,
    /// NaN, Infinity or -Infinity.
    Special,
}

/// Appends the text `numeric_out` prints for the bytes after the varlena
/// header; `None` (nothing written) if they are not a well-formed numeric
/// (the caller then uses the output function).
pub fn numeric_text(body: &[u8], out: &mut Vec<u8>) -> Option<NumericKind> {
    let header = u16::from_ne_bytes([*body.first()?, *body.get(1)?]);
    let flags = header & 0xC000;
    if flags == 0xC000 {
        out.extend_from_slice(match header & 0xF000 {
            0xC000 => b"NaN".as_slice(),
            0xD000 => b"Infinity".as_slice(),
            0xF000 => b"-Infinity".as_slice(),
            _ => return None,
        });
        return Some(NumericKind::Special);
    }
    let (negative, dscale, weight, digits_at) = if flags == 0x8000 {
        let weight_bits = (header & 0x003F) as i32;
        let weight = if header & 0x0040 != 0 {
            weight_bits | !0x003F
        } else {
            weight_bits
        };
        (
            header & 0x2000 != 0,
            ((header & 0x1F80) >> 7) as usize,
            weight,
            2,
        )
    } else {
        let weight = i16::from_ne_bytes([*body.get(2)?, *body.get(3)?]) as i32;
        (flags == 0x4000, (header & 0x3FFF) as usize, weight, 4)
    };
    let raw = body.get(digits_at..)?;
    if raw.len() % 2 != 0 {
        return None;
    }
    // PostgreSQL stores numerics normalized (make_result()): no leading
    // zero digit, and zero with weight 0. Other bytes are not a numeric it
    // wrote, and could print as something that is not a JSON number.
    match Digits(raw).first() {
        None if weight != 0 => return None,
        Some(0) => return None,
        _ => {}
    }
    if !write_decimal(negative, weight, dscale, Digits(raw), out) {
        return None;
    }
    Some(NumericKind::Finite)
}

/// The base-10000 digits, read in place (no copy, no allocation).
#[derive(Clone, Copy)]
struct Digits<'a>(&'a [u8]);

impl Digits<'_> {
    fn len(&self) -> usize {
        self.0.len() / 2
    }
    fn get(&self, i: usize) -> i16 {
        i16::from_ne_bytes([self.0[2 * i], self.0[2 * i + 1]])
    }
    fn first(&self) -> Option<i16> {
        (self.len() > 0).then(|| self.get(0))
    }
}

/// `get_str_from_var()`: base-10000 digits to decimal text with `dscale`
/// digits after the point. False, writing nothing, when a digit is out of
/// range (the bytes are not a numeric).
fn write_decimal(
    negative: bool,
    weight: i32,
    dscale: usize,
    digits: Digits,
    out: &mut Vec<u8>,
) -> bool {
    // Every stored digit is checked, printed or not.
    let valid = |pair: &[u8]| (0..10000).contains(&i16::from_ne_bytes([pair[0], pair[1]]));
    if !digits.0.chunks_exact(2).all(valid) {
        return false;
    }
    let digit_at = |i: i32| -> u16 {
        if i >= 0 && (i as usize) < digits.len() {
            digits.get(i as usize) as u16
        } else {
            0
        }
    };
    let integer_groups = weight.max(0) as usize + 1;
    out.reserve(2 + integer_groups * NBASE_DIGITS + dscale + NBASE_DIGITS);
    if negative {
        out.push(b'-');
    }
    let mut d: i32;
    if weight < 0 {
        d = weight + 1;
        out.push(b'0');
    } else {
        // The first digit group prints without leading zeros.
        push_first_group(out, digit_at(0));
        d = 1;
        while d <= weight {
            push_group(out, digit_at(d));
            d += 1;
        }
    }
    if dscale > 0 {
        out.push(b'.');
        let end = out.len() + dscale;
        let mut written = 0;
        while written < dscale {
            push_group(out, digit_at(d));
            d += 1;
            written += NBASE_DIGITS;
        }
        out.truncate(end);
    }
    true
}

/// A digit group (< 10000) without leading zeros.
fn push_first_group(out: &mut Vec<u8>, dig: u16) {
    let digit = |v: u16| b'0' + (v % 10) as u8;
    match dig {
        0..=9 => out.push(digit(dig)),
        10..=99 => out.extend_from_slice(&DIGIT_PAIRS[dig as usize]),
        100..=999 => {
            out.push(digit(dig / 100));
            out.extend_from_slice(&DIGIT_PAIRS[(dig % 100) as usize]);
        }
        _ => push_group(out, dig),
    }
}

/// A digit group (< 10000) as four digits: two pairs from the table put
/// together in a register and written with one store (four bytes stored
/// one by one and copied as a word would stall the copy's load).
fn push_group(out: &mut Vec<u8>, dig: u16) {
    let pair = |v: u16| u16::from_le_bytes(DIGIT_PAIRS[(v % 100) as usize]) as u32;
    let digits = pair(dig / 100) | pair(dig) << 16;
    out.extend_from_slice(&digits.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn long(negative: bool, dscale: u16, weight: i16, digits: &[i16]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&((if negative { 0x4000 } else { 0 }) | dscale).to_ne_bytes());
        b.extend_from_slice(&weight.to_ne_bytes());
        for d in digits {
            b.extend_from_slice(&d.to_ne_bytes());
        }
        b
    }

    fn short(negative: bool, dscale: u16, weight: i16, digits: &[i16]) -> Vec<u8> {
        let mut header = 0x8000u16 | (dscale << 7);
        if negative {
            header |= 0x2000;
        }
        if weight < 0 {
            header |= 0x0040 | ((weight as u16) & 0x003F);
        } else {
            header |= weight as u16;
        }
        let mut b = header.to_ne_bytes().to_vec();
        for d in digits {
            b.extend_from_slice(&d.to_ne_bytes());
        }
        b
    }

    fn text(body: &[u8]) -> String {
        let mut out = Vec::new();
        numeric_text(body, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn prints_like_numeric_out() {
        // 0 (no digits), 0.00, 1.50, -12345.6789, 0.0001, 10000, 1e-8 scale 10
        assert_eq!(text(&short(false, 0, 0, &[])), "0");
        assert_eq!(text(&short(false, 2, 0, &[])), "0.00");
        assert_eq!(text(&short(false, 2, 0, &[1, 5000])), "1.50");
        assert_eq!(text(&short(true, 4, 1, &[1, 2345, 6789])), "-12345.6789");
        assert_eq!(text(&short(false, 4, -1, &[1])), "0.0001");
        assert_eq!(text(&short(false, 0, 1, &[1])), "10000");
        // Leading groups of every width.
        assert_eq!(text(&short(false, 0, 0, &[7])), "7");
        assert_eq!(text(&short(false, 0, 0, &[42])), "42");
        assert_eq!(text(&short(false, 0, 0, &[999])), "999");
        assert_eq!(text(&short(false, 0, 0, &[1000])), "1000");
        assert_eq!(text(&short(true, 1, 1, &[42, 7, 5000])), "-420007.5");
        assert_eq!(text(&short(false, 10, -2, &[100])), "0.0000010000");
        assert_eq!(text(&short(false, 10, -2, &[1])), "0.0000000100");
        assert_eq!(
            text(&long(
                false,
                10,
                7,
                &[1234, 5678, 9012, 3456, 7890, 1234, 5678, 9012, 3456, 7890, 0]
            )),
            "12345678901234567890123456789012.3456789000"
        );
        assert_eq!(text(&long(true, 0, 2, &[42])), "-4200000000");
        // Display scale beyond the stored digits pads with zeros; a scale
        // that is not a multiple of 4 cuts the last group.
        assert_eq!(text(&long(false, 6, 0, &[3, 1415])), "3.141500");
        assert_eq!(text(&long(false, 3, 0, &[3, 1415])), "3.141");
    }

    #[test]
    fn special_values_and_garbage() {
        assert_eq!(text(&0xC000u16.to_ne_bytes()), "NaN");
        assert_eq!(text(&0xD000u16.to_ne_bytes()), "Infinity");
        assert_eq!(text(&0xF000u16.to_ne_bytes()), "-Infinity");
        let mut out = Vec::new();
        assert!(numeric_text(&[], &mut out).is_none());
        assert!(numeric_text(&long(false, 0, 0, &[10000]), &mut out).is_none());
        assert!(numeric_text(&[0, 0, 0], &mut out).is_none());
        // Not normalized as PostgreSQL stores numerics: it would print
        // leading zeros, which are not a JSON number.
        assert!(numeric_text(&long(false, 0, 2, &[0, 5]), &mut out).is_none());
        assert!(numeric_text(&long(false, 0, 8, &[]), &mut out).is_none());
        assert!(numeric_text(&short(false, 2, -1, &[]), &mut out).is_none());
        assert!(out.is_empty());
    }
}
