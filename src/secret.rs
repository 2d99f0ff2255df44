//! Secrets in the config (tokens, and URLs that may carry a password) never reach a log line,
//! an error or an API response: [`Secret`] prints nothing in `Debug`, and [`redact_url`] is how
//! a URL is shown.

use std::fmt;

/// A token or password. `Debug` and [`Secret::shown`] never print it.
#[derive(Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The value, for the one place that sends or compares it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            f.write_str("Secret(empty)")
        } else {
            f.write_str("Secret(***)")
        }
    }
}

/// A URL that may carry a password (`postgres://user:password@host/db`): compared and used
/// whole, shown with the password replaced by `***`.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretUrl(String);

impl SecretUrl {
    pub fn new(url: impl Into<String>) -> SecretUrl {
        SecretUrl(url.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The URL without its password, for messages.
    pub fn shown(&self) -> String {
        redact_url(&self.0)
    }
}

impl fmt::Debug for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.shown())
    }
}

impl fmt::Display for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.shown())
    }
}

/// `scheme://user:password@host...` → `scheme://user:***@host...`; also hides
/// `password=`/`token=` query values. Anything that is not such a URL is shown whole only if
/// it has no `@` (which could mean userinfo we failed to recognise).
pub fn redact_url(url: &str) -> String {
    let (scheme, rest) = match url.split_once("://") {
        Some((s, r)) => (Some(s), r),
        None => (None, url),
    };
    // The authority ends at the first '/', '?' or '#'; userinfo ends at its last '@'.
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let authority = match authority.rfind('@') {
        Some(at) => {
            let (userinfo, host) = authority.split_at(at);
            match userinfo.split_once(':') {
                Some((user, _password)) => format!("{user}:***{host}"),
                None if scheme.is_none() => format!("***{host}"),
                None => format!("{userinfo}{host}"),
            }
        }
        None => authority.to_owned(),
    };
    let tail = redact_query(tail);
    match scheme {
        Some(s) => format!("{s}://{authority}{tail}"),
        None => format!("{authority}{tail}"),
    }
}

fn redact_query(tail: &str) -> String {
    let Some((path, query)) = tail.split_once('?') else {
        return tail.to_owned();
    };
    let query: Vec<String> = query
        .split('&')
        .map(|kv| match kv.split_once('=') {
            Some((k, _))
                if ["password", "pass", "token", "access_token", "secret"]
                    .contains(&k.to_ascii_lowercase().as_str()) =>
            {
                format!("{k}=***")
            }
            _ => kv.to_owned(),
        })
        .collect();
    format!("{path}?{}", query.join("&"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_show() {
        for (url, shown) in [
            (
                "postgresql+asyncpg://aa:secret@db:5432/x",
                "postgresql+asyncpg://aa:***@db:5432/x",
            ),
            ("rediss://:secret@host:6380/0", "rediss://:***@host:6380/0"),
            ("redis://127.0.0.1:6379", "redis://127.0.0.1:6379"),
            ("mysql://u:p@ss:w0rd@h/db", "mysql://u:***@h/db"),
            (
                "postgres://h/db?sslmode=require&password=secret",
                "postgres://h/db?sslmode=require&password=***",
            ),
            ("sqlite://data/x.db", "sqlite://data/x.db"),
            ("user:secret@host", "user:***@host"),
        ] {
            assert_eq!(redact_url(url), shown);
            assert!(!format!("{:?}", SecretUrl::new(url)).contains("secret"));
        }
        assert_eq!(format!("{:?}", Secret::new("tok")), "Secret(***)");
    }
}
