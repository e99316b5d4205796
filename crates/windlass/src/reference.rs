//! Typed names of the objects a CR owns, declared once.
//!
//! An operator's components refer to each other's objects by name: the web tier's
//! Deployment names the database's Service and the credentials' Secret. Spelled as strings,
//! a typo is found in the cluster; declared once as a [`Ref`], it is a compile error, and a
//! rename touches one line.
//!
//! ```
//! use k8s_openapi::api::apps::v1::StatefulSet;
//! use k8s_openapi::api::core::v1::{Secret, Service};
//! use windlass::reference::Ref;
//!
//! /// The database's StatefulSet, `<cr>-db`.
//! const DATABASE: Ref<StatefulSet> = Ref::new("db");
//! /// Its Service has the same name.
//! const DATABASE_SERVICE: Ref<Service> = DATABASE.cast();
//! const CREDENTIALS: Ref<Secret> = Ref::new("db-credentials");
//!
//! assert_eq!(DATABASE_SERVICE.local_name(), "db");
//! assert_eq!(CREDENTIALS.name_for("shop"), "shop-db-credentials");
//! ```
//!
//! A session resolves a `Ref` for its CR: [`Session::name_of`](crate::session::Session::name_of),
//! [`Session::meta`](crate::session::Session::meta) and
//! [`Session::get`](crate::session::Session::get) take one.

use std::fmt;
use std::marker::PhantomData;

use crate::object::scoped_name;

/// The object of kind `K` named `<cr name>-<local name>` (truncated to a valid name).
pub struct Ref<K> {
    name: &'static str,
    kind: PhantomData<fn() -> K>,
}

impl<K> Ref<K> {
    /// The object `<cr name>-<name>` of kind `K`.
    pub const fn new(name: &'static str) -> Self {
        Ref {
            name,
            kind: PhantomData,
        }
    }

    /// The object of another kind with the same name (a StatefulSet's governing Service).
    pub const fn cast<L>(self) -> Ref<L> {
        Ref::new(self.name)
    }

    /// The name without the CR's prefix.
    pub const fn local_name(&self) -> &'static str {
        self.name
    }

    /// The object's name for the CR named `cr_name`.
    pub fn name_for(&self, cr_name: &str) -> String {
        scoped_name(cr_name, self.name)
    }
}

impl<K> Clone for Ref<K> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K> Copy for Ref<K> {}

impl<K: k8s_openapi::Resource> fmt::Debug for Ref<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Ref<{}>({:?})", K::KIND, self.name)
    }
}

/// Whatever names an object of kind `K` for [`Session::get`](crate::session::Session::get):
/// a [`Ref<K>`], resolved for the CR, or a full name as a string.
pub trait ObjectName<K> {
    /// The object's full name, for the CR named `cr_name`.
    fn resolve(self, cr_name: &str) -> String;
}

impl<K> ObjectName<K> for Ref<K> {
    fn resolve(self, cr_name: &str) -> String {
        self.name_for(cr_name)
    }
}

impl<K> ObjectName<K> for &str {
    fn resolve(self, _: &str) -> String {
        self.to_string()
    }
}

impl<K> ObjectName<K> for String {
    fn resolve(self, _: &str) -> String {
        self
    }
}

impl<K> ObjectName<K> for &String {
    fn resolve(self, _: &str) -> String {
        self.clone()
    }
}
