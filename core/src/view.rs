//! The one table of bearer views (reference §10.1 `USER_TOKEN_VIEWS`): every elevated
//! per-connection profile a bearer's `act.view` may name, with the ledger scope it needs, the
//! face whose exchange serves it, its lifetime cap, and where its connect credential comes from.
//!
//! The bearer codec (io-http), the exchange and the connect decision all read this table; adding
//! a view is one row here and its profile builder in `profiles`. The set is closed on mint and
//! on verify: an unknown view fails closed and never falls back to a profile.

use std::fmt;

use crate::error::{EpError, ErrorCode};

/// The longest a bearer lives, in seconds: short enough that re-minting is the working
/// revocation path.
pub const MAX_BEARER_TTL_SECS: u64 = 900;

/// The lifetime cap of a `transfer-writer` bearer: that one-shot credential's five minutes.
pub const TRANSFER_WRITER_TTL_SECS: u64 = 300;

/// A bearer view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum View {
    Admin,
    Purger,
    ChannelPurger,
    ChannelWriter,
    Deployer,
    ManagerService,
    ManagerCaller,
    SessionCaller,
    TransferWriter,
}

/// Where a view's connect credential comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectSource {
    /// A generic profile built from the bearer alone (its scope re-asserted at mint).
    Generic,
    /// Built only after the bearer's manager instance is re-checked at connect (§8.4).
    ManagerCaller,
    /// Built only after the bearer's redeemed session is re-checked at connect (§8.4).
    SessionCaller,
    /// Never a connect profile: `manager-service` authority is issued by its own door.
    Never,
    /// Issued for one transfer, which no request of this plane names.
    Unserved,
}

/// One row of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ViewSpec {
    pub view: View,
    /// The wire name, which is also the profile's JWT `name`.
    pub name: &'static str,
    /// The ledger scope a holder must have (reference `VIEW_REQUIRED_SCOPE`); `None` for views
    /// any granted actor may ask for.
    pub required_scope: Option<&'static str>,
    /// Whether the public face's exchange serves it (`PUBLIC_EXCHANGE_VIEWS`); the others are
    /// loopback operator surfaces.
    pub public: bool,
    /// The longest a bearer carrying it may live.
    pub ttl_cap_secs: u64,
    pub connect: ConnectSource,
}

const fn row(
    view: View,
    name: &'static str,
    required_scope: Option<&'static str>,
    public: bool,
    connect: ConnectSource,
) -> ViewSpec {
    ViewSpec {
        view,
        name,
        required_scope,
        public,
        ttl_cap_secs: MAX_BEARER_TTL_SECS,
        connect,
    }
}

/// The table, in the reference's order.
pub const VIEWS: [ViewSpec; 9] = [
    row(
        View::Admin,
        "admin",
        Some("admin"),
        false,
        ConnectSource::Generic,
    ),
    row(
        View::Purger,
        "purger",
        Some("admin"),
        false,
        ConnectSource::Generic,
    ),
    row(
        View::ChannelPurger,
        "channel-purger",
        Some("admin"),
        true,
        ConnectSource::Generic,
    ),
    row(
        View::ChannelWriter,
        "channel-writer",
        Some("admin"),
        true,
        ConnectSource::Generic,
    ),
    row(
        View::Deployer,
        "deployer",
        Some("spawn"),
        false,
        ConnectSource::Generic,
    ),
    row(
        View::ManagerService,
        "manager-service",
        Some("supervise"),
        false,
        ConnectSource::Never,
    ),
    row(
        View::ManagerCaller,
        "manager-caller",
        None,
        true,
        ConnectSource::ManagerCaller,
    ),
    row(
        View::SessionCaller,
        "session-caller",
        None,
        true,
        ConnectSource::SessionCaller,
    ),
    ViewSpec {
        ttl_cap_secs: TRANSFER_WRITER_TTL_SECS,
        ..row(
            View::TransferWriter,
            "transfer-writer",
            Some("admin"),
            true,
            ConnectSource::Unserved,
        )
    },
];

impl View {
    pub const ALL: [View; 9] = [
        View::Admin,
        View::Purger,
        View::ChannelPurger,
        View::ChannelWriter,
        View::Deployer,
        View::ManagerService,
        View::ManagerCaller,
        View::SessionCaller,
        View::TransferWriter,
    ];

    /// This view's row of [`VIEWS`].
    pub const fn spec(self) -> &'static ViewSpec {
        // The table lists the views in declaration order.
        match self {
            View::Admin => &VIEWS[0],
            View::Purger => &VIEWS[1],
            View::ChannelPurger => &VIEWS[2],
            View::ChannelWriter => &VIEWS[3],
            View::Deployer => &VIEWS[4],
            View::ManagerService => &VIEWS[5],
            View::ManagerCaller => &VIEWS[6],
            View::SessionCaller => &VIEWS[7],
            View::TransferWriter => &VIEWS[8],
        }
    }

    pub const fn as_str(self) -> &'static str {
        self.spec().name
    }

    /// The view a wire name names, if any.
    pub fn parse(name: &str) -> Option<View> {
        VIEWS
            .iter()
            .find(|row| row.name == name)
            .map(|row| row.view)
    }

    pub const fn required_scope(self) -> Option<&'static str> {
        self.spec().required_scope
    }

    pub const fn on_public_exchange(self) -> bool {
        self.spec().public
    }

    /// The longest a bearer with this view (or none) may live.
    pub const fn ttl_cap_secs(view: Option<View>) -> u64 {
        match view {
            Some(view) => view.spec().ttl_cap_secs,
            None => MAX_BEARER_TTL_SECS,
        }
    }

    pub const fn connect_source(self) -> ConnectSource {
        self.spec().connect
    }

    /// The view an exchange request names, if the exchange mints it: an unknown name, and the
    /// views whose authority another door issues, are refused in one sentence each.
    pub fn served_at_exchange(name: &str) -> Result<View, EpError> {
        let view = View::parse(name).ok_or_else(|| {
            EpError::permission_denied(format!(
                "view {name:?} is not a bearer view ({})",
                View::ALL.map(View::as_str).join(", ")
            ))
        })?;
        match view.connect_source() {
            ConnectSource::Never => Err(EpError::permission_denied(
                "manager-service is never a connect profile; managers are served by POST \
                 /manager-service-authority",
            )),
            // `transfer-writer` names one object upload (`act.transferWriter`) that no exchange
            // request field carries, so there is nothing to bind it to.
            ConnectSource::Unserved => Err(EpError::new(
                ErrorCode::Unimplemented,
                format!(
                    "the {view} view is not served: no exchange field names the transfer it \
                     would be bound to"
                ),
            )),
            _ => Ok(view),
        }
    }
}

impl fmt::Display for View {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_view_is_its_own_row() {
        for view in View::ALL {
            assert_eq!(view.spec().view, view);
            assert_eq!(View::parse(view.as_str()), Some(view));
        }
        assert_eq!(View::parse("agent"), None);
        assert_eq!(View::parse("ADMIN"), None);
    }

    /// Reference `VIEW_REQUIRED_SCOPE` and `PUBLIC_EXCHANGE_VIEWS`.
    #[test]
    fn scopes_and_faces_are_the_references() {
        let scoped: Vec<_> = View::ALL
            .iter()
            .map(|v| (v.as_str(), v.required_scope(), v.on_public_exchange()))
            .collect();
        assert_eq!(
            scoped,
            [
                ("admin", Some("admin"), false),
                ("purger", Some("admin"), false),
                ("channel-purger", Some("admin"), true),
                ("channel-writer", Some("admin"), true),
                ("deployer", Some("spawn"), false),
                ("manager-service", Some("supervise"), false),
                ("manager-caller", None, true),
                ("session-caller", None, true),
                ("transfer-writer", Some("admin"), true),
            ]
        );
        assert_eq!(View::ttl_cap_secs(Some(View::TransferWriter)), 300);
        assert_eq!(View::ttl_cap_secs(Some(View::Admin)), 900);
        assert_eq!(View::ttl_cap_secs(None), 900);
    }

    #[test]
    fn the_exchange_refuses_the_views_other_doors_issue() {
        assert_eq!(
            View::served_at_exchange("manager-service").map_err(|e| e.code),
            Err(ErrorCode::PermissionDenied)
        );
        assert_eq!(
            View::served_at_exchange("transfer-writer").map_err(|e| e.code),
            Err(ErrorCode::Unimplemented)
        );
        assert_eq!(
            View::served_at_exchange("nope").map_err(|e| e.code),
            Err(ErrorCode::PermissionDenied)
        );
        assert_eq!(View::served_at_exchange("deployer"), Ok(View::Deployer));
    }
}
