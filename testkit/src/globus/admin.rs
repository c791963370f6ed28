//! Index administration: `POST /v1/index` (a trial index, 1 MB), `GET /v1/index/<id>`,
//! `GET /v1/index_list`, `DELETE /v1/index/<id>` and `POST .../reopen`, and the roles
//! (`POST .../role`, `GET .../role_list`, `DELETE .../role/<id>`), in the shapes of
//! globus-sdk's recorded responses. The configured indexes are subscription indexes. None of
//! this is in `icicle serve` (one index, made by its directory): a new index here is a new
//! product service over a directory of its own, and an index document is the service's with
//! the cloud's description, status and size limit put over it.

use hyper::body::Incoming;
use hyper::Request;
use icicle_plugins_index::api::auth::Caller;
use icicle_plugins_index::api::tasks::now_date;
use icicle_plugins_index::Visibility;
use serde_json::{json, Value};

use super::http::{error, error_response, json_body, json_response, no_index, Resp};
use super::state::{Grant, Shared, State};

/// A trial index holds this much content.
pub const TRIAL_MAX_MB: u64 = 1;
/// A subscription index holds this much.
const SUBSCRIPTION_MAX_MB: u64 = 100_000;
/// Trial indexes one caller may own.
const TRIAL_LIMIT: usize = 3;

/// One index's description.
#[derive(Debug, Clone)]
pub(super) struct IndexMeta {
    pub(super) display_name: String,
    pub(super) description: String,
    pub(super) creation_date: String,
    pub(super) trial: bool,
    /// `open` or `delete_pending`.
    pub(super) status: &'static str,
    pub(super) roles: Vec<Value>,
}

impl IndexMeta {
    /// A configured index (a subscription's).
    pub(super) fn configured(id: &str) -> IndexMeta {
        IndexMeta {
            display_name: id.to_string(),
            description: String::new(),
            creation_date: now_date(),
            trial: false,
            status: "open",
            roles: Vec::new(),
        }
    }

    /// The most content it may hold, in bytes.
    pub(super) fn max_bytes(&self) -> u64 {
        (if self.trial { TRIAL_MAX_MB } else { SUBSCRIPTION_MAX_MB }) << 20
    }
}

/// The GSearchIndex document of `id`: the product's (counts of every record), with the cloud's
/// fields over it.
fn document(st: &State, id: &str) -> Option<Value> {
    let ix = st.indexes.get(id)?;
    let everyone = Caller { visibility: Visibility::All, writer: true, authenticated: true, bypass: true };
    let mut d = ix.svc.info(&everyone).ok()?;
    let meta = &ix.meta;
    for (k, v) in [
        ("display_name", json!(meta.display_name)),
        ("description", json!(meta.description)),
        ("creation_date", json!(meta.creation_date)),
        ("is_trial", json!(meta.trial)),
        ("subscription_id", if meta.trial { Value::Null } else { json!("emulated-subscription") }),
        ("max_size_in_mb", json!(meta.max_bytes() >> 20)),
        ("status", json!(meta.status)),
        ("permissions", json!(["owner"])),
    ] {
        d[k] = v;
    }
    Some(d)
}

/// Whether `method` on `api` is one of this module's routes.
pub(super) fn is_admin_route(method: &str, api: &[&str]) -> bool {
    matches!(
        (method, api),
        ("POST", ["index"])
            | ("GET", ["index_list"])
            | ("GET" | "DELETE", ["index", _])
            | ("POST", ["index", _, "reopen" | "role"])
            | ("GET", ["index", _, "role_list"])
            | ("DELETE", ["index", _, "role", _])
    )
}

/// Answer one of this module's routes ([`is_admin_route`]).
pub(super) async fn admin(shared: &Shared, req: Request<Incoming>, method: &str, api: &[&str], grant: &Grant) -> Resp {
    match (method, api) {
        ("POST", ["index"]) => create(shared, req, grant).await,
        ("GET", ["index_list"]) => {
            let st = shared.lock();
            json_response(
                200,
                &json!({"index_list": st.indexes.keys().filter_map(|id| document(&st, id)).collect::<Vec<_>>()}),
            )
        }
        ("GET", ["index", id]) => match document(&shared.lock(), id) {
            Some(d) => json_response(200, &d),
            None => no_index(id),
        },
        ("DELETE", ["index", id]) => set_status(shared, id, "open", "delete_pending"),
        ("POST", ["index", id, "reopen"]) => set_status(shared, id, "delete_pending", "open"),
        ("POST", ["index", id, "role"]) => create_role(shared, req, id).await,
        ("GET", ["index", id, "role_list"]) => match shared.lock().indexes.get(*id) {
            Some(ix) => json_response(200, &json!({"role_list": ix.meta.roles})),
            None => no_index(id),
        },
        ("DELETE", ["index", id, "role", role]) => delete_role(shared, id, role),
        _ => error(404, "NotFound.Generic", format!("no route {method} /v1/{}", api.join("/")), Value::Null),
    }
}

async fn create(shared: &Shared, req: Request<Incoming>, grant: &Grant) -> Resp {
    let doc = match json_body(req).await {
        Ok(d) => d,
        Err(e) => return error_response(&e),
    };
    let (Some(name), Some(description)) = (doc["display_name"].as_str(), doc["description"].as_str()) else {
        return error(
            400,
            "BadRequest.ValidationError",
            "an index needs `display_name` and `description` strings",
            Value::Null,
        );
    };
    let (id, role_id) = {
        let mut st = shared.lock();
        if st.indexes.values().filter(|ix| ix.meta.trial).count() >= TRIAL_LIMIT {
            return error(
                409,
                "Conflict.LimitExceeded",
                "Role limit exceeded",
                json!({"constraint": format!("Cannot create more ownership roles on trial indices than the limit ({TRIAL_LIMIT})")}),
            );
        }
        (st.uuid(), st.uuid())
    };
    let mut meta = IndexMeta {
        display_name: name.into(),
        description: description.into(),
        creation_date: now_date(),
        trial: true,
        status: "open",
        roles: Vec::new(),
    };
    let owner = grant.identity.clone().unwrap_or_else(|| "urn:globus:auth:identity:emulator-static-token".into());
    meta.roles.push(role(&role_id, &id, "owner", &owner));
    if let Err(e) = shared.add_index(&id, meta) {
        return error_response(&e);
    }
    json_response(200, &document(&shared.lock(), &id).unwrap_or(Value::Null))
}

fn role(id: &str, index: &str, name: &str, principal: &str) -> Value {
    let kind = if principal.starts_with("urn:globus:groups:") { "group" } else { "identity" };
    json!({"id": id, "index_id": index, "role_name": name, "principal": principal, "principal_type": kind, "creation_date": now_date()})
}

fn set_status(shared: &Shared, id: &str, from: &'static str, to: &'static str) -> Resp {
    let mut st = shared.lock();
    let Some(m) = st.indexes.get_mut(id).map(|ix| &mut ix.meta) else { return no_index(id) };
    if m.status != from {
        return error(
            409,
            "Conflict.IncompatibleIndexStatus",
            format!("Index status ({}) did not match required status for this operation: {from}", m.status),
            Value::Null,
        );
    }
    m.status = to;
    json_response(200, &json!({"index_id": id, "acknowledged": true}))
}

async fn create_role(shared: &Shared, req: Request<Incoming>, id: &str) -> Resp {
    let doc = match json_body(req).await {
        Ok(d) => d,
        Err(e) => return error_response(&e),
    };
    let (Some(name), Some(principal)) = (doc["role_name"].as_str(), doc["principal"].as_str()) else {
        return error(400, "BadRequest.ValidationError", "a role needs `role_name` and `principal`", Value::Null);
    };
    if !matches!(name, "owner" | "admin" | "writer") || !principal.starts_with("urn:globus:") {
        return error(
            400,
            "BadRequest.ValidationError",
            "role_name is owner, admin or writer; principal a urn:globus: URN",
            Value::Null,
        );
    }
    let mut st = shared.lock();
    let role_id = st.uuid();
    let Some(m) = st.indexes.get_mut(id).map(|ix| &mut ix.meta) else { return no_index(id) };
    let r = role(&role_id, id, name, principal);
    m.roles.push(r.clone());
    json_response(200, &r)
}

fn delete_role(shared: &Shared, id: &str, role_id: &str) -> Resp {
    let mut st = shared.lock();
    let Some(m) = st.indexes.get_mut(id).map(|ix| &mut ix.meta) else { return no_index(id) };
    match m.roles.iter().position(|r| r["id"] == role_id) {
        Some(i) => json_response(200, &json!({"success": true, "deleted": m.roles.remove(i)})),
        None => error(404, "NotFound.Generic", format!("There is no role {role_id} on index {id}"), Value::Null),
    }
}
