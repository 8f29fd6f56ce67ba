//! Which IP addresses a tenant's requests may reach without the operator
//! naming them: global unicast addresses only.
//!
//! Invariant: an address inside any range below is *not global*, whatever
//! form it is written in: an IPv4 address embedded in an IPv6 one
//! (IPv4-mapped, IPv4-compatible, NAT64, 6to4) is judged as that IPv4
//! address, so `::ffff:127.0.0.1` is loopback like `127.0.0.1`.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why an address is not global, in words a refusal can quote; `None` for
/// a global address.
pub fn non_global(address: IpAddr) -> Option<&'static str> {
    match address {
        IpAddr::V4(v4) => non_global_v4(v4),
        IpAddr::V6(v6) => non_global_v6(v6),
    }
}

/// IPv4 ranges that are not global (RFC 6890 and its successors).
const V4_RANGES: &[([u8; 4], u8, &str)] = &[
    ([0, 0, 0, 0], 8, "\"this network\" (unspecified)"),
    ([10, 0, 0, 0], 8, "private"),
    ([100, 64, 0, 0], 10, "shared (CGNAT)"),
    ([127, 0, 0, 0], 8, "loopback"),
    ([169, 254, 0, 0], 16, "link-local (cloud metadata)"),
    ([172, 16, 0, 0], 12, "private"),
    ([192, 0, 0, 0], 24, "IETF protocol assignment"),
    ([192, 0, 2, 0], 24, "documentation"),
    ([192, 88, 99, 0], 24, "6to4 relay"),
    ([192, 168, 0, 0], 16, "private"),
    ([198, 18, 0, 0], 15, "benchmarking"),
    ([198, 51, 100, 0], 24, "documentation"),
    ([203, 0, 113, 0], 24, "documentation"),
    ([224, 0, 0, 0], 4, "multicast"),
    ([240, 0, 0, 0], 4, "reserved (and broadcast)"),
];

fn non_global_v4(address: Ipv4Addr) -> Option<&'static str> {
    let ranges = V4_RANGES
        .iter()
        .map(|(network, prefix, why)| (u128::from(u32::from_be_bytes(*network)), *prefix, *why));
    first_holding(u128::from(u32::from(address)), 32, ranges)
}

/// IPv6 ranges that are not global and embed no IPv4 address.
const V6_RANGES: &[(u128, u8, &str)] = &[
    (0, 128, "unspecified"),
    (1, 128, "loopback"),
    (0x0064_ff9b_0001 << 80, 48, "NAT64 (local use)"),
    (0x0100 << 112, 64, "discard-only"),
    (0x2001_0000 << 96, 32, "Teredo"),
    (0x2001_0002 << 96, 48, "benchmarking"),
    (0x2001_0010 << 96, 28, "ORCHID"),
    (0x2001_0020 << 96, 28, "ORCHIDv2"),
    (0x2001_0db8 << 96, 32, "documentation"),
    (0x3fff << 112, 20, "documentation"),
    (0x5f00 << 112, 16, "segment routing"),
    (0xfc00 << 112, 7, "unique-local (private)"),
    (0xfe80 << 112, 10, "link-local"),
    (0xfec0 << 112, 10, "site-local"),
    (0xff00 << 112, 8, "multicast"),
];

fn non_global_v6(address: Ipv6Addr) -> Option<&'static str> {
    if let Some(v4) = embedded_v4(address) {
        return non_global_v4(v4);
    }
    first_holding(u128::from(address), 128, V6_RANGES.iter().copied())
}

/// Why the first of `ranges` (network, prefix length, why) that holds
/// `address`, of `width` bits, is not global.
fn first_holding(
    address: u128,
    width: u32,
    ranges: impl IntoIterator<Item = (u128, u8, &'static str)>,
) -> Option<&'static str> {
    let network_of = |bits: u128, prefix: u8| bits.checked_shr(width - u32::from(prefix)).unwrap_or(0);
    ranges
        .into_iter()
        .find_map(|(network, prefix, why)| (network_of(address, prefix) == network_of(network, prefix)).then_some(why))
}

/// The IPv4 address an IPv6 address stands for, if it stands for one:
/// IPv4-mapped (`::ffff:a.b.c.d`), IPv4-compatible (`::a.b.c.d`, but not
/// `::` and `::1`), NAT64 (`64:ff9b::a.b.c.d`) and 6to4 (`2002:AABB:CCDD::`).
fn embedded_v4(address: Ipv6Addr) -> Option<Ipv4Addr> {
    let bits = u128::from(address);
    let low = Ipv4Addr::from(bits as u32);
    match bits >> 32 {
        0xffff | 0x0064_ff9b_0000_0000_0000_0000 => return Some(low),
        0 if bits > 1 => return Some(low),
        _ => {}
    }
    (bits >> 112 == 0x2002).then(|| Ipv4Addr::from((bits >> 80) as u32))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn why(address: &str) -> Option<&'static str> {
        non_global(address.parse().expect("an IP address"))
    }

    #[test]
    fn every_kind_of_internal_address_is_refused() {
        for (address, expected) in [
            ("127.0.0.1", "loopback"),
            ("127.255.255.254", "loopback"),
            ("169.254.169.254", "link-local (cloud metadata)"),
            ("10.0.0.1", "private"),
            ("172.16.0.1", "private"),
            ("172.31.255.255", "private"),
            ("192.168.1.1", "private"),
            ("100.64.0.1", "shared (CGNAT)"),
            ("100.127.255.255", "shared (CGNAT)"),
            ("0.0.0.0", "\"this network\" (unspecified)"),
            ("224.0.0.1", "multicast"),
            ("255.255.255.255", "reserved (and broadcast)"),
            ("192.0.2.7", "documentation"),
            ("198.51.100.7", "documentation"),
            ("203.0.113.7", "documentation"),
            ("198.19.0.1", "benchmarking"),
            ("::", "unspecified"),
            ("::1", "loopback"),
            ("fe80::1", "link-local"),
            ("fd00::1", "unique-local (private)"),
            ("fc00::1", "unique-local (private)"),
            ("ff02::1", "multicast"),
            ("2001:db8::1", "documentation"),
            ("::ffff:127.0.0.1", "loopback"),
            ("::ffff:169.254.169.254", "link-local (cloud metadata)"),
            ("::127.0.0.1", "loopback"),
            ("::10.1.2.3", "private"),
            ("64:ff9b::a9fe:a9fe", "link-local (cloud metadata)"),
            ("2002:7f00:1::", "loopback"),
            ("2002:a00:1::", "private"),
            ("fd00:ec2::254", "unique-local (private)"),
        ] {
            assert_eq!(why(address), Some(expected), "{address}");
        }
    }

    #[test]
    fn global_addresses_pass_in_every_form() {
        for address in [
            "1.1.1.1",
            "8.8.8.8",
            "100.63.255.255",
            "100.128.0.0",
            "172.15.255.255",
            "172.32.0.0",
            "169.253.255.255",
            "11.0.0.1",
            "2606:4700:4700::1111",
            "::ffff:1.1.1.1",
            "64:ff9b::101:101",
            "2002:101:101::",
        ] {
            assert_eq!(why(address), None, "{address}");
        }
    }
}
