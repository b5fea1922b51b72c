//! Who an invocation runs for: the op `moat.caller`.

use crate::{code, json, transport, Error, Result};

/// The principal an invocation runs for, as [`caller`] returns it: the
/// user and organization the host authenticated, the user's roles, and the
/// correlation id the host's log records and audit events carry.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Principal {
    /// The user the invocation runs for.
    pub user: String,
    /// The user's organization, which scopes every stored thing.
    pub org: String,
    /// The user's roles (empty when none).
    pub roles: Vec<String>,
    /// The invocation's correlation id.
    pub correlation_id: String,
}

impl Principal {
    /// Whether the principal holds `role`.
    pub fn has_role(&self, role: &str) -> bool {
        self.roles.iter().any(|r| r == role)
    }
}

/// Returns who the invocation runs for (the op `moat.caller`). It needs no
/// grant. The principal is the host's, never anything in the input: key
/// per-user data by `caller()?.user`, not by a user id the caller sends,
/// which anyone can write.
pub fn caller() -> Result<Principal> {
    transport::round_trip("moat.caller", b"{}", |body| {
        let reply = json::Object::parse(body, "moat.caller")?;
        let user = reply.get_string("user")?.unwrap_or_default();
        let org = reply.get_string("org")?.unwrap_or_default();
        if user.is_empty() || org.is_empty() {
            return Err(Error::new(code::INTERNAL, "op moat.caller: the reply names no user or organization"));
        }
        Ok(Principal {
            user,
            org,
            roles: reply.get_strings("roles")?,
            correlation_id: reply.get_string("correlation_id")?.unwrap_or_default(),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::fake;
    use std::cell::RefCell;
    use std::rc::Rc;

    #[test]
    fn caller_reads_the_principal() {
        let seen = Rc::new(RefCell::new(Vec::<(String, String)>::new()));
        let s = seen.clone();
        let reply = Rc::new(RefCell::new(r#"{"user":"ann","org":"acme","roles":["admin","vi\"ewer"],"correlation_id":"c-1"}"#.to_string()));
        let r = reply.clone();
        fake::set(Some(Box::new(move |op, req| {
            s.borrow_mut().push((op.to_string(), String::from_utf8(req.to_vec()).unwrap()));
            (0, r.borrow().as_bytes().to_vec())
        })));
        let p = caller().unwrap();
        assert_eq!(
            p,
            Principal { user: "ann".into(), org: "acme".into(), roles: vec!["admin".into(), "vi\"ewer".into()], correlation_id: "c-1".into() }
        );
        assert_eq!(seen.borrow()[0], ("moat.caller".to_string(), "{}".to_string()));
        assert!(p.has_role("admin") && !p.has_role("adm"));
        *reply.borrow_mut() = r#"{"user":"bob","org":"acme","roles":[],"correlation_id":"c-2"}"#.into();
        assert_eq!(caller().unwrap().roles, Vec::<String>::new());
        *reply.borrow_mut() = r#"{"org":"acme"}"#.into();
        assert!(caller().unwrap_err().is(code::INTERNAL), "a reply without a user");
        *reply.borrow_mut() = r#"{"user":"a","org":"b","roles":[1]}"#.into();
        assert!(caller().unwrap_err().is(code::INTERNAL), "a role that is not a string");
        fake::set(None);
    }
}
