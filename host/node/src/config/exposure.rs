//! Who may reach a process's ports: the rules of the configuration that
//! decide it, checked with the rest before anything binds.
//!
//! - Without auth, the gRPC port stays on loopback, in `waft dev` and
//!   `waft serve` alike: a call there needs no token, so only the machine's
//!   own users may make one.
//! - `/metrics` beyond loopback asks for `auth.metrics_token`, a bearer
//!   token that grants the metrics and nothing else (Prometheus sends it);
//!   on loopback it is optional.
//! - `allowed_hosts` are host names the servers answer to besides their
//!   addresses and, on loopback, `localhost` (`waft_api::AllowedHosts`):
//!   a request for any other name is refused, which keeps a web page from
//!   reaching a server through a name it points at the server (DNS
//!   rebinding). The names of `peers` are answered too: they are how the
//!   installation calls its own roles, so processes sharing one file reach
//!   each other by name with nothing more to list.

use axum::http::uri::Authority;

use super::{Config, ConfigError, MIN_CLUSTER_TOKEN, Role};

impl Config {
    /// The host names this process's servers answer to besides their
    /// addresses: `allowed_hosts` and the names in `peers`.
    pub fn answered_hosts(&self) -> Vec<String> {
        let peers = &self.peers;
        let peer_names = [&peers.frontend, &peers.controller, &peers.hsc]
            .into_iter()
            .flatten()
            .filter_map(|peer| {
                let bare = peer
                    .split_once("://")
                    .map_or(peer.as_str(), |(_, rest)| rest);
                let authority: Authority = bare.trim_end_matches('/').parse().ok()?;
                Some(authority.host().to_owned())
            });
        self.allowed_hosts
            .iter()
            .cloned()
            .chain(peer_names)
            .collect()
    }

    /// Checks the rules above.
    pub(super) fn validate_exposure(&self, role: Option<Role>) -> Result<(), ConfigError> {
        self.validate_auth(role)?;
        if let Some(token) = &self.auth.metrics_token
            && token.len() < MIN_CLUSTER_TOKEN
        {
            return Err(ConfigError::new(
                "auth.metrics_token",
                format!("must be at least {MIN_CLUSTER_TOKEN} characters"),
            ));
        }
        if let Some(metrics) = self.metrics_listen
            && !metrics.ip().to_canonical().is_loopback()
            && self.auth.metrics_token.is_none()
        {
            return Err(ConfigError::new(
                "auth.metrics_token",
                format!(
                    "/metrics on {metrics} (metrics_listen) is beyond loopback, so it needs a \
                     token (which Prometheus sends as a bearer token); or serve it on a \
                     loopback address"
                ),
            ));
        }
        for name in &self.allowed_hosts {
            if !is_host_name(name) {
                return Err(ConfigError::new(
                    "allowed_hosts",
                    format!(
                        "{name:?} is not a host name: list names alone, without scheme, \
                         port or wildcard (addresses are always answered)"
                    ),
                ));
            }
        }
        Ok(())
    }

    /// A cluster token when auth is on; loopback when it is off.
    fn validate_auth(&self, role: Option<Role>) -> Result<(), ConfigError> {
        if !self.auth.enabled {
            if self.listen.ip().to_canonical().is_loopback() {
                return Ok(());
            }
            let process = match role {
                None => "waft dev".to_owned(),
                Some(role) => format!("waft serve {}", role.as_str()),
            };
            return Err(ConfigError::new(
                "listen",
                format!(
                    "{process} listens on {} without auth: enable auth (auth.enabled and \
                     auth.cluster_token) or listen on a loopback address",
                    self.listen
                ),
            ));
        }
        match &self.auth.cluster_token {
            Some(token) if token.len() >= MIN_CLUSTER_TOKEN => Ok(()),
            Some(_) => Err(ConfigError::new(
                "auth.cluster_token",
                format!("must be at least {MIN_CLUSTER_TOKEN} characters"),
            )),
            None => Err(ConfigError::new(
                "auth.cluster_token",
                "auth is enabled, so the cluster token is required",
            )),
        }
    }
}

/// A DNS name (a trailing dot allowed).
fn is_host_name(name: &str) -> bool {
    waft_core::grants::is_host_name(name.strip_suffix('.').unwrap_or(name))
}

#[cfg(test)]
mod tests {
    use super::super::*;

    fn load(pairs: &[(&str, &str)]) -> Config {
        let env = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()));
        Config::load(None, env).unwrap()
    }

    /// Every role of `waft serve`, as its configuration needs it.
    const ROLES: [(Role, &[(&str, &str)]); 5] = [
        (Role::Frontend, &[("WAFT_STORE_URL", "postgres://db/waft")]),
        (Role::Hsc, &[("WAFT_STORE_URL", "postgres://db/waft")]),
        (Role::Consumer, &[("WAFT_STORE_URL", "postgres://db/waft")]),
        (
            Role::Controller,
            &[("WAFT_PEERS_FRONTEND", "f:1"), ("WAFT_PEERS_HSC", "h:1")],
        ),
        (
            Role::Executor,
            &[
                ("WAFT_PEERS_FRONTEND", "f:1"),
                ("WAFT_PEERS_CONTROLLER", "c:1"),
                ("WAFT_PEERS_HSC", "h:1"),
            ],
        ),
    ];

    /// `waft serve` takes the rule of `waft dev`: without auth, loopback
    /// only, and the refusal names the settings that lift it.
    #[test]
    fn serve_without_auth_stays_on_loopback() {
        let token = "x".repeat(32);
        for (role, needs) in ROLES {
            for listen in ["0.0.0.0:7070", "[::]:7070", "10.0.0.5:7070"] {
                let mut pairs = needs.to_vec();
                pairs.push(("WAFT_LISTEN", listen));
                let error = load(&pairs).validate(Some(role)).unwrap_err();
                assert_eq!(error.key.as_deref(), Some("listen"), "{role:?} {error}");
                let text = error.to_string();
                assert!(
                    text.contains("waft serve") && text.contains("auth.enabled"),
                    "{text}"
                );
                pairs.extend([
                    ("WAFT_AUTH_ENABLED", "true"),
                    ("WAFT_AUTH_CLUSTER_TOKEN", token.as_str()),
                ]);
                load(&pairs).validate(Some(role)).unwrap();
            }
            let mut pairs = needs.to_vec();
            pairs.push(("WAFT_LISTEN", "127.0.0.1:7070"));
            load(&pairs).validate(Some(role)).unwrap();
            pairs.push(("WAFT_LISTEN", "[::1]:7070"));
            load(&pairs).validate(Some(role)).unwrap();
        }
    }

    #[test]
    fn dev_without_auth_stays_on_loopback_and_auth_needs_a_long_token() {
        let missing = load(&[("WAFT_AUTH_ENABLED", "true")]);
        let error = missing.validate(None).unwrap_err();
        assert!(
            error.to_string().contains("WAFT_AUTH_CLUSTER_TOKEN"),
            "{error}"
        );
        let short = load(&[
            ("WAFT_AUTH_ENABLED", "true"),
            ("WAFT_AUTH_CLUSTER_TOKEN", "short"),
        ]);
        assert!(short.validate(None).unwrap_err().to_string().contains("32"));
        let open = load(&[("WAFT_LISTEN", "0.0.0.0:7070")]);
        let error = open.validate(None).unwrap_err().to_string();
        assert!(
            error.contains("loopback") && error.contains("waft dev"),
            "{error}"
        );
        let token = "x".repeat(32);
        let guarded = load(&[
            ("WAFT_LISTEN", "0.0.0.0:7070"),
            ("WAFT_AUTH_ENABLED", "true"),
            ("WAFT_AUTH_CLUSTER_TOKEN", token.as_str()),
        ]);
        guarded.validate(None).unwrap();
    }

    /// `/metrics` beyond loopback needs its own token, which Prometheus
    /// presents; on loopback it is optional.
    #[test]
    fn metrics_beyond_loopback_need_a_token() {
        let open = load(&[("WAFT_METRICS_LISTEN", "0.0.0.0:9464")]);
        let error = open.validate(None).unwrap_err();
        assert_eq!(error.key.as_deref(), Some("auth.metrics_token"), "{error}");
        assert!(
            error.to_string().contains("WAFT_AUTH_METRICS_TOKEN"),
            "{error}"
        );
        let short = load(&[
            ("WAFT_METRICS_LISTEN", "0.0.0.0:9464"),
            ("WAFT_AUTH_METRICS_TOKEN", "short"),
        ]);
        let error = short.validate(None).unwrap_err().to_string();
        assert!(error.contains("32"), "{error}");
        let token = "m".repeat(32);
        let guarded = load(&[
            ("WAFT_METRICS_LISTEN", "0.0.0.0:9464"),
            ("WAFT_AUTH_METRICS_TOKEN", token.as_str()),
        ]);
        guarded.validate(None).unwrap();
        assert_eq!(guarded.auth.metrics_token.as_deref(), Some(token.as_str()));
        load(&[("WAFT_METRICS_LISTEN", "127.0.0.1:9464")])
            .validate(None)
            .unwrap();
    }

    /// The names a server answers to besides its addresses: host names,
    /// from the file or a comma-separated variable.
    #[test]
    fn allowed_hosts_are_host_names() {
        let config = Config::load(
            Some("allowed_hosts = [\"waft.internal\", \"Dash.Example.com.\"]\n"),
            [],
        )
        .unwrap();
        config.validate(None).unwrap();
        assert_eq!(config.allowed_hosts, ["waft.internal", "Dash.Example.com."]);
        let config = load(&[("WAFT_ALLOWED_HOSTS", "a.example, b.example")]);
        assert_eq!(config.allowed_hosts, ["a.example", "b.example"]);
        let config = load(&[
            ("WAFT_ALLOWED_HOSTS", "waft.example.com"),
            ("WAFT_PEERS_FRONTEND", "waft-frontend:7070"),
            ("WAFT_PEERS_HSC", "https://waft-hsc.internal:7073"),
            ("WAFT_PEERS_CONTROLLER", "127.0.0.1:7072"),
        ]);
        assert_eq!(
            config.answered_hosts(),
            [
                "waft.example.com",
                "waft-frontend",
                "127.0.0.1",
                "waft-hsc.internal"
            ]
        );
        for bad in [
            "https://waft.internal",
            "waft.internal:7070",
            "*.example.com",
            "",
            "a b",
        ] {
            let config = Config {
                allowed_hosts: vec![bad.to_owned()],
                ..Config::default()
            };
            let error = config.validate(None).unwrap_err();
            assert_eq!(
                error.key.as_deref(),
                Some("allowed_hosts"),
                "{bad:?}: {error}"
            );
        }
    }
}
