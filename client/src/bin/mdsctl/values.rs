//! How mdsctl reads and writes values a command line carries: modes, times, extended
//! attribute values (as setfattr(1) reads them and getfattr(1) prints them) and device numbers
//! (Linux's `makedev` encoding).

use std::fmt::Write as _;
use std::time::UNIX_EPOCH;

use mds_client::proto::SetTime;

/// An extended attribute's value as given on the command line, decoded.
#[derive(Clone, Debug)]
pub(crate) struct XattrBytes(pub(crate) Vec<u8>);

pub(crate) fn parse_mode(s: &str) -> Result<u32, String> {
    u32::from_str_radix(s, 8)
        .ok()
        .filter(|m| *m <= 0o7777)
        .ok_or_else(|| format!("invalid mode {s:?} (octal, e.g. 755)"))
}

/// `now`, nanoseconds since the Unix epoch, or an RFC 3339 time (`T` or a space between date
/// and time, `Z` optional).
pub(crate) fn parse_set_time(s: &str) -> Result<SetTime, String> {
    if s == "now" {
        return Ok(SetTime::Now);
    }
    if let Ok(ns) = s.parse::<i64>() {
        return Ok(SetTime::At(ns));
    }
    let time = humantime::parse_rfc3339_weak(s).map_err(|e| {
        format!(
            "{e}: give `now`, an RFC 3339 time such as 2024-05-01T12:00:00Z, or nanoseconds \
             since the epoch"
        )
    })?;
    let since = time
        .duration_since(UNIX_EPOCH)
        .map_err(|_| "before the epoch".to_owned())?;
    i64::try_from(since.as_nanos())
        .map(SetTime::At)
        .map_err(|_| "past 2262, the last time 64 bits of nanoseconds can say".to_owned())
}

/// A value as setfattr(1) reads one: `0x`/`0X` and hex digits, or text in double quotes with
/// escapes, or text as it is. (setfattr's base64, `0s`, is refused rather than taken as text.)
pub(crate) fn parse_xattr_value(s: &str) -> Result<XattrBytes, String> {
    let bytes = if let Some(digits) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        decode_hex(digits).ok_or("0x must be followed by pairs of hex digits")?
    } else if s.starts_with("0s") || s.starts_with("0S") {
        return Err(
            "base64 (0s) is not supported: give 0x and hex digits, or the text in \
                    double quotes"
                .to_owned(),
        );
    } else if let Some(inner) = s.strip_prefix('"').and_then(|r| r.strip_suffix('"')) {
        unquote(inner)?
    } else {
        s.as_bytes().to_vec()
    };
    Ok(XattrBytes(bytes))
}

pub(crate) fn decode_hex(digits: &str) -> Option<Vec<u8>> {
    let digits = digits.as_bytes();
    if !digits.len().is_multiple_of(2) {
        return None;
    }
    digits
        .chunks_exact(2)
        .map(|pair| {
            let high = char::from(pair[0]).to_digit(16)?;
            let low = char::from(pair[1]).to_digit(16)?;
            u8::try_from(high << 4 | low).ok()
        })
        .collect()
}

/// The inside of a double-quoted value: `\` and one to three octal digits is that byte, `\`
/// and anything else is that character.
pub(crate) fn unquote(inner: &str) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(inner.len());
    let mut bytes = inner.bytes().peekable();
    while let Some(b) = bytes.next() {
        if b != b'\\' {
            out.push(b);
            continue;
        }
        let mut code = 0u32;
        let mut digits = 0;
        while digits < 3
            && let Some(d) = bytes.next_if(|d| (b'0'..=b'7').contains(d))
        {
            code = code * 8 + u32::from(d - b'0');
            digits += 1;
        }
        if digits == 0 {
            out.push(bytes.next().ok_or("it ends in a lone backslash")?);
        } else {
            out.push(u8::try_from(code).map_err(|_| format!("\\{code:o} is not a byte"))?);
        }
    }
    Ok(out)
}

/// Linux's `makedev`: the device number of (major, minor), as `st_rdev` holds it.
pub(crate) fn makedev(major: u32, minor: u32) -> u64 {
    let (major, minor) = (u64::from(major), u64::from(minor));
    ((major & 0xffff_f000) << 32)
        | ((major & 0xfff) << 8)
        | ((minor & 0xffff_ff00) << 12)
        | (minor & 0xff)
}

/// Linux's `major`: the inverse of [`makedev`]'s first half.
pub(crate) fn major(rdev: u64) -> u32 {
    let major = ((rdev >> 32) & 0xffff_f000) | ((rdev >> 8) & 0xfff);
    u32::try_from(major).expect("masked to 32 bits")
}

/// Linux's `minor`.
pub(crate) fn minor(rdev: u64) -> u32 {
    let minor = ((rdev >> 12) & 0xffff_ff00) | (rdev & 0xff);
    u32::try_from(minor).expect("masked to 32 bits")
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(2 * bytes.len());
    for b in bytes {
        write!(s, "{b:02x}").expect("writing to a String cannot fail");
    }
    s
}

/// A value as getfattr(1) prints it: text in double quotes, with `"`, `\` and what is not
/// printable ASCII as `\NNN` (octal), if at most one byte in eight is not printable; else
/// `0x` and hex digits. setfattr (and `mdsctl setfattr -v`) reads both back.
pub(crate) fn xattr_text(value: &[u8]) -> String {
    let printable = |b: u8| (0x20..0x7f).contains(&b);
    let unprintable = value.iter().filter(|b| !printable(**b)).count();
    if value.len() < unprintable * 8 {
        return format!("0x{}", hex(value));
    }
    let mut s = String::with_capacity(value.len() + 2);
    s.push('"');
    for &b in value {
        if printable(b) && b != b'"' && b != b'\\' {
            s.push(char::from(b));
        } else {
            write!(s, "\\{b:03o}").expect("writing to a String cannot fail");
        }
    }
    s.push('"');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_numbers_encode_as_linux_makedev_does() {
        assert_eq!(makedev(1, 3), 0x0103);
        assert_eq!(makedev(8, 17), 0x0811);
        // Past the old 8-bit fields: glibc's makedev(0x12345, 0x6789ab).
        let rdev = makedev(0x12345, 0x0067_89ab);
        assert_eq!(rdev, 0x0001_2006_7893_45ab);
        assert_eq!((major(rdev), minor(rdev)), (0x12345, 0x0067_89ab));
        for (ma, mi) in [(0, 0), (u32::MAX, u32::MAX), (4095, 255), (4096, 256)] {
            assert_eq!((major(makedev(ma, mi)), minor(makedev(ma, mi))), (ma, mi));
        }
    }

    #[test]
    fn values_decode_as_setfattr_reads_them_and_print_as_getfattr_does() {
        let value = |s: &str| parse_xattr_value(s).map(|v| v.0);
        assert_eq!(value("plain text").unwrap(), b"plain text");
        assert_eq!(value("0x00ff7A").unwrap(), [0, 0xff, 0x7a]);
        assert_eq!(value("0X").unwrap(), b"");
        assert_eq!(value(r#""a\"b\\c\012""#).unwrap(), b"a\"b\\c\n");
        assert_eq!(value(r#""0x1""#).unwrap(), b"0x1");
        for bad in ["0x1", "0xzz", "0sYWJj", r#""a\""#, r#""\400""#] {
            assert!(value(bad).is_err(), "{bad:?}");
        }
        assert_eq!(xattr_text(b"hello"), r#""hello""#);
        assert_eq!(xattr_text(b""), r#""""#);
        assert_eq!(xattr_text(b"say \"hi\"\n\\"), r#""say \042hi\042\012\134""#);
        assert_eq!(xattr_text(&[0, 1, 0xfe]), "0x0001fe");
        for v in [&b"say \"hi\"\n\\"[..], &[0, 1, 0xfe], b"", b"x"] {
            assert_eq!(value(&xattr_text(v)).unwrap(), v, "{v:?}");
        }
    }

    #[test]
    fn times_are_now_nanoseconds_or_rfc3339() {
        assert_eq!(parse_set_time("now"), Ok(SetTime::Now));
        assert_eq!(
            parse_set_time("1700000000123456789"),
            Ok(SetTime::At(1_700_000_000_123_456_789))
        );
        assert_eq!(
            parse_set_time("2023-11-14T22:13:20Z"),
            Ok(SetTime::At(1_700_000_000_000_000_000))
        );
        assert_eq!(
            parse_set_time("2023-11-14 22:13:20.5"),
            Ok(SetTime::At(1_700_000_000_500_000_000))
        );
        assert!(parse_set_time("yesterday").is_err());
        assert!(parse_set_time("9999-01-01T00:00:00Z").is_err(), "past 2262");
    }
}
