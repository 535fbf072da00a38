//! Cross-origin safety for a server on the user's own machine.
//!
//! A web page the user visits can send requests to `http://127.0.0.1:8080` from their
//! browser. Three guards keep such a page out unless the operator lets it in (`--cors`):
//! - no `Access-Control-Allow-Origin` header, so the page cannot read any answer;
//! - a request carrying an `Origin` that is neither the server's own (its page at `/`) nor
//!   one `--cors` names is refused (403), so a page cannot make the server work for it
//!   blind either;
//! - on a loopback address, a request whose `Host` is not a loopback name is refused (403):
//!   a page on a DNS name rebound to 127.0.0.1 is same-origin in the browser's eyes, but
//!   its requests name that host.
//!
//! `--cors '*'` turns all three off (llama-server's behaviour); `--cors URL,URL` allows those
//! origins (and then answers them with CORS headers) and turns the `Host` check off;
//! `--cors localhost` (llama-server's `--cors-origins localhost`) allows every page served
//! from a loopback origin (`http://localhost:3000`, `http://127.0.0.1:5173`, `http://[::1]`,
//! any port) and keeps the `Host` check.

use axum::http::{header, HeaderMap, HeaderValue, Method};
use tower_http::cors::{AllowOrigin, CorsLayer};

use crate::error::ApiError;

/// How the server treats other origins.
#[derive(Debug, Clone)]
pub(crate) struct OriginPolicy {
    /// Any origin may call (`--cors '*'`).
    any: bool,
    /// Origins that may call (`--cors URL,…`).
    allowed: Vec<String>,
    /// Pages on loopback origins may call (`--cors localhost`).
    loopback_origins: bool,
    /// Requests must name a loopback host (the server listens on loopback, no `--cors`).
    loopback_host_only: bool,
}

impl OriginPolicy {
    /// The policy for `--cors` `origins` on a server listening on `host` (one address, or
    /// several separated by commas: the `Host` check applies when all are loopback).
    pub fn new(origins: &[String], host: &str) -> OriginPolicy {
        let any = origins.iter().any(|o| o.trim() == "*");
        let loopback_origins = origins.iter().any(|o| o.trim() == "localhost");
        let allowed: Vec<String> = origins
            .iter()
            .map(|o| o.trim().trim_end_matches('/').to_string())
            .filter(|o| !o.is_empty() && o != "*" && o != "localhost")
            .collect();
        OriginPolicy {
            loopback_host_only: !any
                && allowed.is_empty()
                && host_list(host).into_iter().all(is_loopback_name),
            any,
            allowed,
            loopback_origins,
        }
    }

    /// The CORS layer: permissive for `*`, the allowed origins (a list, and loopback ones
    /// for `localhost`), or none at all.
    pub fn layer(&self) -> Option<CorsLayer> {
        if self.any {
            return Some(CorsLayer::permissive());
        }
        if self.allowed.is_empty() && !self.loopback_origins {
            return None;
        }
        let allow = if self.loopback_origins {
            let list = self.allowed.clone();
            AllowOrigin::predicate(move |origin: &HeaderValue, _| {
                origin
                    .to_str()
                    .is_ok_and(|o| is_loopback_origin(o) || list.iter().any(|a| a == o))
            })
        } else {
            AllowOrigin::list(
                self.allowed
                    .iter()
                    .filter_map(|o| HeaderValue::from_str(o).ok()),
            )
        };
        Some(
            CorsLayer::new()
                .allow_origin(allow)
                .allow_methods([Method::GET, Method::POST, Method::OPTIONS])
                .allow_headers([
                    header::AUTHORIZATION,
                    header::CONTENT_TYPE,
                    header::HeaderName::from_static("x-api-key"),
                ]),
        )
    }

    /// 403 for a request from a page this server does not serve.
    pub fn check(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        if self.any {
            return Ok(());
        }
        let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
        if self.loopback_host_only {
            if let Some(h) = host {
                if !is_loopback_name(host_name(h)) {
                    return Err(ApiError::forbidden(format!(
                        "this server listens on a loopback address and answers requests for \
                         localhost only, not for the host '{}' (start it with --cors ORIGINS \
                         to allow pages from other origins)",
                        h.chars().take(100).collect::<String>()
                    )));
                }
            }
        }
        let Some(origin) = headers.get(header::ORIGIN) else {
            return Ok(());
        };
        let origin = origin.to_str().unwrap_or("");
        let same = host.is_some_and(|h| {
            origin
                .strip_prefix("http://")
                .or_else(|| origin.strip_prefix("https://"))
                == Some(h)
        });
        if same
            || self.allowed.iter().any(|a| a == origin)
            || (self.loopback_origins && is_loopback_origin(origin))
        {
            return Ok(());
        }
        Err(ApiError::forbidden(format!(
            "requests from the origin '{}' are not allowed (start the server with --cors \
             ORIGIN to allow a web page on another origin)",
            origin.chars().take(100).collect::<String>()
        )))
    }
}

/// The name of a `Host` value (`name:port`, `[v6]:port`).
fn host_name(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    }
}

/// An `Origin` (`scheme://host[:port]`) whose host is a loopback name: `http://localhost:3000`
/// yes, `http://localhost.evil.com` no.
fn is_loopback_origin(origin: &str) -> bool {
    origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
        .is_some_and(|rest| !rest.contains('/') && is_loopback_name(host_name(rest)))
}

/// `localhost` (and its subdomains), 127.0.0.0/8 and ::1.
/// The addresses of a `--host` value: split at commas, trimmed, an IPv6 address's brackets
/// removed (`[::1]` is `::1`), empty entries left out ([`crate::ServerConfig::hosts`]).
pub(crate) fn host_list(host: &str) -> Vec<&str> {
    host.split(',')
        .map(|h| {
            let h = h.trim();
            h.strip_prefix('[')
                .and_then(|h| h.strip_suffix(']'))
                .unwrap_or(h)
        })
        .filter(|h| !h.is_empty())
        .collect()
}

fn is_loopback_name(name: &str) -> bool {
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    if name == "localhost" || name.ends_with(".localhost") {
        return true;
    }
    let bare = name.trim_start_matches('[').trim_end_matches(']');
    bare.parse::<std::net::IpAddr>()
        .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn loopback_server_refuses_other_hosts_and_origins() {
        let p = OriginPolicy::new(&[], "127.0.0.1");
        assert!(p.layer().is_none());
        for ok in [
            "127.0.0.1:8080",
            "localhost:8080",
            "[::1]:8080",
            "localhost",
        ] {
            assert!(p.check(&headers(&[("host", ok)])).is_ok(), "{ok}");
        }
        let e = p
            .check(&headers(&[("host", "evil.example:8080")]))
            .unwrap_err();
        assert_eq!(e.status.as_u16(), 403);
        // The server's own page, and clients that send no Origin, pass.
        let own = [
            ("host", "127.0.0.1:8080"),
            ("origin", "http://127.0.0.1:8080"),
        ];
        assert!(p.check(&headers(&own)).is_ok());
        let other = [
            ("host", "127.0.0.1:8080"),
            ("origin", "https://evil.example"),
        ];
        assert!(p.check(&headers(&other)).is_err());
    }

    /// Several addresses: the `Host` check holds when every one is loopback.
    #[test]
    fn several_hosts_check_hosts_only_when_all_are_loopback() {
        let evil = headers(&[("host", "evil.example:8080")]);
        let both = OriginPolicy::new(&[], "127.0.0.1,::1");
        assert!(both.check(&evil).is_err());
        assert!(both.check(&headers(&[("host", "[::1]:8080")])).is_ok());
        let open = OriginPolicy::new(&[], "127.0.0.1, 0.0.0.0");
        assert!(open.check(&evil).is_ok());
    }

    #[test]
    fn cors_lists_and_star() {
        let p = OriginPolicy::new(&["https://app.example/".into()], "127.0.0.1");
        assert!(p.layer().is_some());
        let h = [
            ("host", "rebound.example"),
            ("origin", "https://app.example"),
        ];
        assert!(p.check(&headers(&h)).is_ok());
        let h = [("host", "127.0.0.1"), ("origin", "https://other.example")];
        assert!(p.check(&headers(&h)).is_err());
        let p = OriginPolicy::new(&["*".into()], "127.0.0.1");
        let h = [
            ("host", "rebound.example"),
            ("origin", "https://any.example"),
        ];
        assert!(p.check(&headers(&h)).is_ok());
        // A non-loopback address names many hosts: no Host check.
        let p = OriginPolicy::new(&[], "0.0.0.0");
        assert!(p.check(&headers(&[("host", "myserver.lan:8080")])).is_ok());
    }

    #[test]
    fn cors_localhost_allows_loopback_origins_only() {
        let p = OriginPolicy::new(&["localhost".into()], "127.0.0.1");
        assert!(p.layer().is_some());
        for ok in [
            "http://localhost",
            "http://localhost:8080",
            "https://127.0.0.1:3000",
            "http://[::1]",
            "http://[::1]:3000",
            "http://app.localhost:5173",
        ] {
            let h = [("host", "127.0.0.1:8080"), ("origin", ok)];
            assert!(p.check(&headers(&h)).is_ok(), "{ok}");
        }
        for bad in [
            "http://web.mydomain.fr",
            "http://notlocalhost",
            "http://localhost.evil.com",
            "http://127.0.0.1.evil.com",
            "file://localhost",
            "null",
        ] {
            let h = [("host", "127.0.0.1:8080"), ("origin", bad)];
            assert!(p.check(&headers(&h)).is_err(), "{bad}");
        }
        // The Host check (DNS rebinding) stays.
        assert!(p.check(&headers(&[("host", "rebound.example")])).is_err());
        // With a list as well, both pass.
        let p = OriginPolicy::new(
            &["localhost".into(), "https://app.example".into()],
            "127.0.0.1",
        );
        let h = [("host", "127.0.0.1"), ("origin", "https://app.example")];
        assert!(p.check(&headers(&h)).is_ok());
    }
}
