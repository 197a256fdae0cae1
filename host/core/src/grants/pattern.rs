//! Allow-list patterns: parsing, matching, and which addresses a name may
//! reach (see the parent module for the syntax).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::GrantError;

/// One allow-list entry; see the [module docs](super) for the syntax.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboundPattern {
    text: String,
    scheme: Option<Scheme>,
    host: HostPattern,
    port: PortPattern,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scheme {
    Http,
    Https,
}

impl Scheme {
    fn default_port(self) -> u16 {
        match self {
            Scheme::Http => 80,
            Scheme::Https => 443,
        }
    }

    fn parse(text: &str) -> Option<Self> {
        match text {
            "http" => Some(Scheme::Http),
            "https" => Some(Scheme::Https),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum HostPattern {
    /// Every host: only in `*://*:*`.
    Any,
    Name(String),
    /// `*.suffix`: the suffix's subdomains.
    Subdomains(String),
    Network(Network),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PortPattern {
    /// The request's scheme's own port.
    Default,
    Exact(u16),
    Any,
}

/// An address, or a network of them (`10.0.0.0/8`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Network {
    address: IpAddr,
    prefix: u8,
}

impl Network {
    fn contains(&self, ip: IpAddr) -> bool {
        match (self.address, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            (IpAddr::V4(_), IpAddr::V6(ip)) => ip
                .to_ipv4_mapped()
                .is_some_and(|ip| self.contains(IpAddr::V4(ip))),
            (IpAddr::V6(_), IpAddr::V4(_)) => false,
        }
    }
}

impl OutboundPattern {
    /// Whether a request to `scheme://host:port` is on this entry.
    pub fn matches(&self, scheme: &str, host: &str, port: u16) -> bool {
        let Some(scheme) = Scheme::parse(scheme) else {
            return false;
        };
        if self.scheme.is_some_and(|s| s != scheme) {
            return false;
        }
        let port_fits = match self.port {
            PortPattern::Any => true,
            PortPattern::Exact(p) => p == port,
            PortPattern::Default => port == scheme.default_port(),
        };
        if !port_fits {
            return false;
        }
        let host = host.trim_end_matches('.');
        match &self.host {
            HostPattern::Any => true,
            HostPattern::Name(name) => name == host,
            HostPattern::Subdomains(suffix) => host
                .strip_suffix(suffix.as_str())
                .is_some_and(|rest| !rest.is_empty()),
            HostPattern::Network(network) => {
                parse_address(host).is_some_and(|ip| network.contains(ip))
            }
        }
    }

    /// Whether this entry names `ip` itself (an address or a network holding
    /// it): how a non-global address is allowed.
    pub fn names_address(&self, ip: IpAddr) -> bool {
        matches!(&self.host, HostPattern::Network(network) if network.contains(ip))
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The narrowest pattern allowing requests to `scheme://host:port`:
    /// what to add to a list that refused one.
    pub fn suggest(scheme: &str, host: &str, port: u16) -> String {
        let default = Scheme::parse(scheme).map(Scheme::default_port);
        let host = if host.contains(':') {
            format!("[{host}]")
        } else {
            host.to_owned()
        };
        if default == Some(port) {
            format!("{scheme}://{host}")
        } else {
            format!("{scheme}://{host}:{port}")
        }
    }
}

/// An address as a URI's host spells it (`10.0.0.7`, `[::1]` or `::1`).
pub fn parse_address(host: &str) -> Option<IpAddr> {
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    bare.parse().ok()
}

impl FromStr for OutboundPattern {
    type Err = GrantError;

    fn from_str(text: &str) -> Result<Self, GrantError> {
        let refuse = |reason: &str| GrantError::Pattern {
            pattern: text.to_owned(),
            reason: reason.to_owned(),
        };
        let (scheme, rest) = text
            .split_once("://")
            .ok_or_else(|| refuse("expected SCHEME://HOST[:PORT], e.g. https://api.example.com"))?;
        let scheme = match scheme {
            "*" => None,
            other => Some(
                Scheme::parse(other)
                    .ok_or_else(|| refuse("the scheme must be http, https or * (either)"))?,
            ),
        };
        if rest.contains(['?', '#', '@']) {
            return Err(refuse(NOT_A_PATH));
        }
        let (host, port) = split_port(rest).map_err(|reason| refuse(&reason))?;
        if port.is_some_and(|port| port.contains('/')) {
            return Err(refuse(NOT_A_PATH));
        }
        let port =
            match port {
                None => PortPattern::Default,
                Some("*") => PortPattern::Any,
                Some(number) => {
                    PortPattern::Exact(number.parse::<u16>().ok().filter(|p| *p != 0).ok_or_else(
                        || refuse("the port must be a number within 1..=65535, or *"),
                    )?)
                }
            };
        let host = host.to_ascii_lowercase();
        let host = host.trim_end_matches('.');
        let host = if host == "*" {
            if text != "*://*:*" {
                return Err(refuse(
                    "a wildcard host allows every host; to mean that, write the pattern *://*:* whole",
                ));
            }
            HostPattern::Any
        } else if let Some(network) = parse_network(host).map_err(|reason| refuse(&reason))? {
            HostPattern::Network(network)
        } else if let Some(suffix) = host.strip_prefix("*.") {
            check_name(suffix).map_err(|reason| refuse(&reason))?;
            if !suffix.contains('.') {
                return Err(refuse(
                    "*. must be followed by a domain of at least two labels (*.example.com): \
                     a wildcard over a whole top-level domain allows nearly everything",
                ));
            }
            HostPattern::Subdomains(format!(".{suffix}"))
        } else {
            check_name(host).map_err(|reason| refuse(&reason))?;
            HostPattern::Name(host.to_owned())
        };
        Ok(Self {
            text: text.to_owned(),
            scheme,
            host,
            port,
        })
    }
}

const NOT_A_PATH: &str = "a pattern names a destination (scheme, host, port): no path, query or \
     user; a / follows an address only, as a network length (10.0.0.0/8)";

/// `host:port`, `host`, `[v6]:port`, `[v6/len]`.
fn split_port(rest: &str) -> Result<(&str, Option<&str>), String> {
    if let Some(bracketed) = rest.strip_prefix('[') {
        let (inside, after) = bracketed
            .split_once(']')
            .ok_or("an IPv6 address needs its closing ]")?;
        return match after {
            "" => Ok((inside, None)),
            port => port
                .strip_prefix(':')
                .map(|port| (inside, Some(port)))
                .ok_or_else(|| "expected :PORT after the IPv6 address".to_owned()),
        };
    }
    Ok(match rest.rsplit_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (rest, None),
    })
}

/// An address or network, if `host` is one.
fn parse_network(host: &str) -> Result<Option<Network>, String> {
    let (address, prefix) = match host.split_once('/') {
        Some((address, prefix)) => (address, Some(prefix)),
        None => (host, None),
    };
    let Ok(address) = address.parse::<IpAddr>() else {
        if prefix.is_some() {
            return Err(NOT_A_PATH.into());
        }
        return Ok(None);
    };
    let width = if address.is_ipv4() { 32 } else { 128 };
    let prefix = match prefix {
        None => width,
        Some(text) => text
            .parse::<u8>()
            .ok()
            .filter(|p| *p <= width)
            .ok_or_else(|| format!("the network length must be within 0..={width}"))?,
    };
    if prefix == 0 {
        return Err("a network of length 0 is every address; write *://*:* to mean that".into());
    }
    Ok(Some(Network { address, prefix }))
}

fn check_name(name: &str) -> Result<(), String> {
    if is_host_name(name) {
        Ok(())
    } else {
        Err(format!("{name:?} is not a host name"))
    }
}

/// A DNS name: dot-separated labels of letters, digits and inner hyphens,
/// 63 bytes a label and 253 in all.
pub fn is_host_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

impl fmt::Display for OutboundPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl Serialize for OutboundPattern {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for OutboundPattern {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// Whether `ip` is an address of the public internet: not loopback,
/// private, shared, link-local, unspecified, multicast, documentation or
/// otherwise reserved. Only these are reached through a name.
///
/// An IPv6 address that carries an IPv4 one is judged by the IPv4 address
/// where the carrier is transparent: IPv4-mapped (`::ffff:0:0/96`) and the
/// well-known NAT64 prefix (`64:ff9b::/96`, which DNS64 gives every IPv4
/// name on an IPv6-only network) are the address they embed. Every other
/// prefix that tunnels or translates to IPv4 is not global, whatever it
/// embeds: IPv4-compatible (`::/96`), IPv4-translated (`::ffff:0:0:0/96`),
/// local-use NAT64 (the rest of `64:ff9b::/32`, where the network chooses
/// where the IPv4 address sits), 6to4 (`2002::/16`) and Teredo (in
/// `2001::/23`). They are retired or local, so the safe reading costs
/// nothing: a pattern that names such an address still reaches it.
pub fn is_global(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(ip) => is_global_v4(ip),
        IpAddr::V6(ip) => match transparent_v4(ip) {
            Some(v4) => is_global_v4(v4),
            None => is_global_v6(ip),
        },
    }
}

/// The IPv4 address an IPv4-mapped or well-known-prefix NAT64 address
/// stands for.
fn transparent_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return Some(v4);
    }
    let [.., a, b, c, d] = ip.octets();
    (ip.segments()[..6] == [0x64, 0xff9b, 0, 0, 0, 0]).then(|| Ipv4Addr::new(a, b, c, d))
}

fn is_global_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    !(ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_broadcast()
        || ip.is_documentation()
        || ip.is_multicast()
        || a == 0
        // Shared address space (carrier-grade NAT), 100.64.0.0/10.
        || (a == 100 && (b & 0xc0) == 64)
        // IETF protocol assignments, 192.0.0.0/24.
        || (a == 192 && b == 0 && c == 0)
        // Benchmarking, 198.18.0.0/15.
        || (a == 198 && (b & 0xfe) == 18)
        // Reserved, 240.0.0.0/4.
        || a >= 240)
}

fn is_global_v6(ip: Ipv6Addr) -> bool {
    let s = ip.segments();
    !(ip.is_multicast()
        // IPv4-compatible, ::/96, with the unspecified and loopback addresses.
        || s[..6] == [0; 6]
        // IPv4-translated, ::ffff:0:0:0/96.
        || s[..6] == [0, 0, 0, 0, 0xffff, 0]
        // NAT64 but the well-known prefix (judged above), 64:ff9b::/32.
        || (s[0] == 0x64 && s[1] == 0xff9b)
        // Discard-only, 100::/64.
        || (s[0] == 0x0100 && s[1..4] == [0, 0, 0])
        // IETF protocol assignments (Teredo, benchmarking, ORCHID), 2001::/23.
        || (s[0] == 0x2001 && s[1] < 0x0200)
        // Documentation, 2001:db8::/32 and 3fff::/20.
        || (s[0] == 0x2001 && s[1] == 0x0db8)
        || (s[0] == 0x3fff && s[1] < 0x1000)
        // 6to4, 2002::/16.
        || s[0] == 0x2002
        // Segment routing, 5f00::/16.
        || s[0] == 0x5f00
        // Unique local, fc00::/7.
        || (s[0] & 0xfe00) == 0xfc00
        // Link-local, fe80::/10, and the retired site-local, fec0::/10.
        || (s[0] & 0xffc0) == 0xfe80
        || (s[0] & 0xffc0) == 0xfec0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(text: &str) -> OutboundPattern {
        text.parse()
            .unwrap_or_else(|e| panic!("{text} should parse: {e}"))
    }

    fn refused(text: &str) -> String {
        match text.parse::<OutboundPattern>() {
            Ok(_) => panic!("{text} should be refused"),
            Err(error) => error.to_string(),
        }
    }

    #[test]
    fn patterns_match_their_destinations() {
        let api = pattern("https://api.example.com");
        assert!(api.matches("https", "api.example.com", 443));
        assert!(api.matches("https", "api.example.com.", 443));
        assert!(!api.matches("http", "api.example.com", 80));
        assert!(!api.matches("https", "api.example.com", 8443));
        assert!(!api.matches("https", "evil-api.example.com", 443));

        let subdomains = pattern("https://*.example.com:8443");
        assert!(subdomains.matches("https", "a.example.com", 8443));
        assert!(subdomains.matches("https", "a.b.example.com", 8443));
        assert!(!subdomains.matches("https", "example.com", 8443));
        assert!(!subdomains.matches("https", "badexample.com", 8443));
        assert!(!subdomains.matches("https", "a.example.com", 443));

        let network = pattern("http://10.0.0.0/8:*");
        assert!(network.matches("http", "10.1.2.3", 9000));
        assert!(!network.matches("http", "11.1.2.3", 9000));
        assert!(!network.matches("https", "10.1.2.3", 443));
        assert!(network.names_address("10.9.9.9".parse().unwrap()));
        assert!(!api.names_address("10.9.9.9".parse().unwrap()));

        let either = pattern("*://localhost:8080");
        assert!(either.matches("http", "localhost", 8080));
        assert!(either.matches("https", "localhost", 8080));
        let default_port = pattern("*://example.org");
        assert!(default_port.matches("http", "example.org", 80));
        assert!(default_port.matches("https", "example.org", 443));
        assert!(!default_port.matches("http", "example.org", 443));

        let v6 = pattern("http://[::1]:8080");
        assert!(v6.matches("http", "::1", 8080));
        assert!(v6.matches("http", "[::1]", 8080));
        assert!(v6.names_address("::1".parse().unwrap()));
        let v6_net = pattern("https://[fd00::/8]");
        assert!(v6_net.matches("https", "fd12::1", 443));

        let everything = pattern("*://*:*");
        assert!(everything.matches("http", "anything.example", 1));
        assert!(!everything.names_address("127.0.0.1".parse().unwrap()));
        assert!(!everything.matches("ftp", "example.com", 21));
    }

    #[test]
    fn bad_patterns_say_what_is_wrong() {
        for (text, says) in [
            ("api.example.com", "SCHEME://HOST"),
            ("ftp://example.com", "scheme"),
            ("https://example.com/path", "no path"),
            ("https://user@example.com", "no path, query or user"),
            ("https://example.com:0", "port"),
            ("https://example.com:70000", "port"),
            ("https://*", "*://*:*"),
            ("*://*", "*://*:*"),
            ("https://*:443", "*://*:*"),
            ("https://*.com", "two labels"),
            ("https://exa mple.com", "not a host name"),
            ("http://10.0.0.0/0", "every address"),
            ("http://10.0.0.0/33", "0..=32"),
            ("http://example.com/8", "no path"),
            ("http://example.com:8080/path", "no path"),
            ("http://[::1", "closing ]"),
        ] {
            let error = refused(text);
            assert!(error.contains(says), "{text}: {error}");
            assert!(error.contains(text), "{text}: {error}");
        }
    }

    #[test]
    fn only_public_addresses_are_global() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "0.0.0.0",
            "100.64.0.1",
            "255.255.255.255",
            "224.0.0.1",
            "::1",
            "::",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
        ] {
            assert!(!is_global(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["93.184.215.14", "1.1.1.1", "2606:4700::1111"] {
            assert!(is_global(ip.parse().unwrap()), "{ip}");
        }
    }

    /// IPv6 prefixes that carry or reach IPv4, and retired ones: none is a
    /// way around the check on the address a request reaches.
    #[test]
    fn translation_prefixes_do_not_reach_the_inside() {
        let reach = [
            ("64:ff9b::a00:5", "NAT64 of 10.0.0.5"),
            ("64:ff9b::7f00:1", "NAT64 of 127.0.0.1"),
            ("64:ff9b::a9fe:a9fe", "NAT64 of 169.254.169.254"),
            ("64:ff9b:1::a00:5", "local-use NAT64"),
            (
                "64:ff9b:1:5db8:d7:e00::",
                "local-use NAT64 of a public address",
            ),
            ("2002:a00:5::1", "6to4 of 10.0.0.5"),
            ("2002:5db8:d70e::1", "6to4 of a public address"),
            ("::a00:5", "IPv4-compatible 10.0.0.5"),
            ("::5db8:d70e", "IPv4-compatible public address"),
            ("::ffff:0:a00:5", "IPv4-translated 10.0.0.5"),
            ("2001::1", "Teredo"),
            ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "Teredo"),
            ("2001:2::1", "benchmarking"),
            ("fec0::1", "site-local"),
            ("fed0::1", "site-local"),
            ("3fff::1", "documentation"),
            ("5f00::1", "segment routing"),
        ]
        .into_iter()
        .filter(|(ip, _)| is_global(ip.parse().unwrap()))
        .collect::<Vec<_>>();
        assert_eq!(reach, [], "taken for public addresses");
        // The well-known NAT64 prefix of a public address is that address:
        // on an IPv6-only network, DNS64 gives every IPv4 name one.
        for ip in ["64:ff9b::5db8:d70e", "64:ff9b::101:101", "2001:4860::8888"] {
            assert!(is_global(ip.parse().unwrap()), "{ip}");
        }
    }
}
