//! The connect-time profiles the auth callout mints (reference-auth-service §8.4): golden rows of
//! the `agent` profile and of every view for one fixed binding, the refusals, and confinement
//! properties. Expected rows are written out from the TypeScript reference (`Cotal-AI/Cotal`);
//! each block names the file it was read from.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

#[cfg(test)]
mod connect {
    use cotal_core::jwt::UnixSeconds;
    use cotal_core::names::{ActorToken, LifecycleUid, OwnerToken, Principal, SpaceName};
    use cotal_core::profiles::*;
    use cotal_core::view::View;
    use cotal_core::ErrorCode;
    use proptest::prelude::*;

    const OWNER: &str = "u_aaaaaaaaaaaaaaaaaaaaaaaaaa";
    const UID: &str = "zyxwvutsrqponmlkjihgfedcba";
    const OTHER_UID: &str = "abcdefghijklmnopqrstuvwxyz";
    const NONCE: &str = "ibxNONCE0001";
    const INBOX: &str = "_INBOX_ibxNONCE0001.>";
    const NOW: u64 = 1_700_000_000;
    const EXP: u64 = NOW + 900;

    fn s(rows: &[&str]) -> Vec<String> {
        rows.iter().map(|r| (*r).to_owned()).collect()
    }
    fn principal() -> Principal {
        Principal::new(
            OwnerToken::parse(OWNER).unwrap(),
            ActorToken::parse("alice").unwrap(),
        )
    }
    fn ttl() -> ConnectTtl {
        ConnectTtl::until(UnixSeconds(NOW), UnixSeconds(EXP)).unwrap()
    }
    fn uid() -> LifecycleUid {
        LifecycleUid::parse(UID).unwrap()
    }
    fn conn() -> ConnId {
        ConnId::parse(NONCE).unwrap()
    }
    fn binding() -> AgentBinding {
        AgentBinding {
            space: SpaceName::parse("prod").unwrap(),
            principal: principal(),
            lifecycle_uid: uid(),
            allow_subscribe: s(&["general", "team.>"]),
            allow_publish: s(&["general"]),
            role: Some("reviewer".to_owned()),
            scope: s(&["spawn"]),
            conn_nonce: conn(),
            ttl: ttl(),
        }
    }
    fn view() -> ViewBinding {
        ViewBinding {
            space: SpaceName::parse("prod").unwrap(),
            principal: principal(),
            conn_nonce: conn(),
            ttl: ttl(),
        }
    }
    fn view_binding(scope: &[&str]) -> ConnectViewBinding {
        ConnectViewBinding {
            view: view(),
            lifecycle_uid: uid(),
            scope: s(scope),
        }
    }
    fn tags() -> Vec<String> {
        s(&[
            "owner:u_aaaaaaaaaaaaaaaaaaaaaaaaaa",
            "actor:alice",
            "principal:u_aaaaaaaaaaaaaaaaaaaaaaaaaa.alice",
        ])
    }
    fn all_rows(p: &Profile) -> Vec<&String> {
        let perms = &p.permissions;
        perms
            .publish
            .allow
            .iter()
            .chain(&perms.subscribe.allow)
            .collect()
    }

    /// `provision.ts` `permissionsFor` agent arm (pub/deny/sub in its emission order) with the
    /// `subjects.ts` names and the `endpoint-grants.ts` baseline and spawn capability rows,
    /// with the presence and channel-registry watch rows a reference endpoint's `kv.watch()`
    /// opens.
    #[test]
    fn issued_profile_census_agent() {
        let p = agent(&binding()).unwrap();
        assert_eq!(p.name, "agent");
        assert_eq!(p.tags, tags());
        assert_eq!(p.ttl_seconds, 900);
        let c = "u_aaaaaaaaaaaaaaaaaaaaaaaaaa.alice.zyxwvutsrqponmlkjihgfedcba";
        let n = "u_aaaaaaaaaaaaaaaaaaaaaaaaaa-alice-zyxwvutsrqponmlkjihgfedcba";
        let publish = vec![
            "cotal.prod.chat.u_aaaaaaaaaaaaaaaaaaaaaaaaaa.alice.general".to_owned(),
            "cotal.prod.inst.*.*.u_aaaaaaaaaaaaaaaaaaaaaaaaaa.alice".to_owned(),
            "cotal.prod.svc.*.u_aaaaaaaaaaaaaaaaaaaaaaaaaa.alice".to_owned(),
            "cotal.prod.ctl.delivery.u_aaaaaaaaaaaaaaaaaaaaaaaaaa.alice".to_owned(),
            "$JS.API.INFO".to_owned(),
            "$JS.API.STREAM.INFO.CHAT_prod".to_owned(),
            "$JS.API.STREAM.INFO.KV_cotal_presence_prod".to_owned(),
            "$JS.API.STREAM.INFO.KV_cotal_channels_prod".to_owned(),
            format!("$JS.API.CONSUMER.CREATE.CHAT_prod.chathist_{n}.cotal.prod.chat.*.*.general"),
            format!("$JS.API.CONSUMER.CREATE.CHAT_prod.chathist_{n}.cotal.prod.chat.*.*.team.>"),
            format!("$JS.API.CONSUMER.INFO.CHAT_prod.chathist_{n}"),
            format!("$JS.API.CONSUMER.MSG.NEXT.CHAT_prod.chathist_{n}"),
            format!("$JS.API.CONSUMER.DELETE.CHAT_prod.chathist_{n}"),
            format!("$JS.API.CONSUMER.INFO.DM_prod.dm_{n}"),
            format!("$JS.API.CONSUMER.MSG.NEXT.DM_prod.dm_{n}"),
            format!("$JS.ACK.DM_prod.dm_{n}.>"),
            format!("$JS.API.CONSUMER.INFO.DLV_prod.dlv_{n}"),
            format!("$JS.API.CONSUMER.MSG.NEXT.DLV_prod.dlv_{n}"),
            format!("$JS.ACK.DLV_prod.dlv_{n}.>"),
            "$JS.API.CONSUMER.CREATE.KV_cotal_presence_prod.>".to_owned(),
            "$JS.API.CONSUMER.INFO.KV_cotal_presence_prod.>".to_owned(),
            "$JS.API.CONSUMER.DELETE.KV_cotal_presence_prod.>".to_owned(),
            "$JS.FC.>".to_owned(),
            "$KV.cotal_presence_prod.u_aaaaaaaaaaaaaaaaaaaaaaaaaa.alice".to_owned(),
            "$JS.API.STREAM.MSG.GET.KV_cotal_channels_prod".to_owned(),
            "$JS.API.CONSUMER.CREATE.KV_cotal_channels_prod.>".to_owned(),
            "$JS.API.CONSUMER.INFO.KV_cotal_channels_prod.>".to_owned(),
            "$JS.API.CONSUMER.DELETE.KV_cotal_channels_prod.>".to_owned(),
            "$JS.API.STREAM.INFO.KV_cotal_delivery_prod".to_owned(),
            "$JS.API.STREAM.MSG.GET.KV_cotal_delivery_prod".to_owned(),
            "$JS.API.CONSUMER.INFO.TASK_prod.svc_reviewer".to_owned(),
            "$JS.API.CONSUMER.MSG.NEXT.TASK_prod.svc_reviewer".to_owned(),
            "$JS.ACK.TASK_prod.svc_reviewer.>".to_owned(),
            format!("cotal.prod.ep.one.*.describe.{c}.*"),
            "$JS.API.DIRECT.GET.EPC_prod.cotal.prod.epc.>".to_owned(),
            format!("cotal.prod.ep.one.delivery.join.{c}.*"),
            format!("cotal.prod.ep.one.delivery.leave.{c}.*"),
            format!("cotal.prod.ep.one.delivery.list.{c}.*"),
            format!("cotal.prod.ep.one.manager.stop.self.{c}.*"),
            format!("cotal.prod.ep.one.manager.spawn.{c}.*"),
            format!("cotal.prod.ep.one.manager.despawn.owner.{OWNER}.{c}.*"),
            format!("cotal.prod.ep.one.manager.attach.owner.{OWNER}.{c}.*"),
            format!("cotal.prod.ep.one.manager.define-persona.{c}.*"),
            format!("cotal.prod.ep.one.manager.inspect.{c}.*"),
        ];
        assert_eq!(p.permissions.publish.allow, publish);
        assert_eq!(
            p.permissions.publish.deny,
            s(&[
                "$JS.API.CONSUMER.CREATE.DM_prod",
                "$JS.API.CONSUMER.CREATE.DM_prod.>",
                "$JS.API.CONSUMER.DURABLE.CREATE.DM_prod.>",
                "$JS.API.CONSUMER.CREATE.TASK_prod",
                "$JS.API.CONSUMER.CREATE.TASK_prod.>",
                "$JS.API.CONSUMER.DURABLE.CREATE.TASK_prod.>",
                "$JS.API.CONSUMER.CREATE.DLV_prod",
                "$JS.API.CONSUMER.CREATE.DLV_prod.>",
                "$JS.API.CONSUMER.DURABLE.CREATE.DLV_prod.>",
            ])
        );
        let subscribe = vec![
            INBOX.to_owned(),
            "cotal.prod.ctl.delivery.u_aaaaaaaaaaaaaaaaaaaaaaaaaa.alice.>".to_owned(),
            "cotal.prod.chat.*.*.general".to_owned(),
            "cotal.prod.chat.*.*.team.>".to_owned(),
            format!("cotal.prod.ep.reply.*.*.*.{c}.*"),
            format!("cotal.prod.epe.manager.*.*.goal.{c}.>"),
        ];
        assert_eq!(p.permissions.subscribe.allow, subscribe);
        assert!(p.permissions.subscribe.deny.is_empty());
        assert_eq!(p.permissions.response, None);
    }

    /// `provision.ts` agent arm defaults: an empty read ACL reads `general`, an empty post ACL
    /// posts nowhere, no role binds no task queue, and a bare scope mints only the baseline.
    #[test]
    fn issued_profile_census_agent_defaults() {
        let b = AgentBinding {
            allow_subscribe: vec![],
            allow_publish: vec![],
            role: None,
            scope: vec![],
            ..binding()
        };
        let p = agent(&b).unwrap();
        let perms = &p.permissions;
        assert!(!perms.publish.allow.iter().any(|r| r.contains(".chat.u_")));
        assert!(!perms.publish.allow.iter().any(|r| r.contains("TASK_")));
        assert!(perms
            .subscribe
            .allow
            .contains(&"cotal.prod.chat.*.*.general".to_owned()));
        let ep: Vec<&String> = perms
            .publish
            .allow
            .iter()
            .filter(|r| r.starts_with("cotal.prod.ep."))
            .collect();
        assert_eq!(ep.len(), 5, "{ep:?}");
        assert!(!perms.subscribe.allow.iter().any(|r| r.contains(".epe.")));
    }

    /// `provision.ts` agent arm, the `admin` capability: the admin instrument set of
    /// `endpoint-grants.ts` `operatorInstrumentCapabilities("admin")`, any-mode rows included.
    #[test]
    fn issued_profile_census_agent_admin_capability() {
        let b = AgentBinding {
            scope: s(&["admin"]),
            ..binding()
        };
        let p = agent(&b).unwrap();
        let c = "u_aaaaaaaaaaaaaaaaaaaaaaaaaa.alice.zyxwvutsrqponmlkjihgfedcba";
        let ep: Vec<String> = p
            .permissions
            .publish
            .allow
            .iter()
            .filter(|r| r.starts_with("cotal.prod.ep.") && !r.contains(".delivery."))
            .cloned()
            .collect();
        let mut expected = vec![
            format!("cotal.prod.ep.one.*.describe.{c}.*"),
            format!("cotal.prod.ep.one.manager.stop.self.{c}.*"),
            format!("cotal.prod.ep.one.manager.status.{c}.*"),
            format!("cotal.prod.ep.one.manager.ps.{c}.*"),
            format!("cotal.prod.ep.all.manager.ps.{c}.*"),
        ];
        for cmd in ["inspect", "models", "spawn", "define-persona"] {
            expected.push(format!("cotal.prod.ep.one.manager.{cmd}.{c}.*"));
        }
        for cmd in ["despawn", "attach"] {
            expected.push(format!("cotal.prod.ep.one.manager.{cmd}.any.*.{c}.*"));
        }
        for cmd in [
            "purge",
            "launch",
            "resume-preserved",
            "commit-resume",
            "finalize-resume",
            "prepare-preservation",
            "commit-preservation",
            "abort-preservation",
        ] {
            expected.push(format!("cotal.prod.ep.one.manager.{cmd}.{c}.*"));
        }
        assert_eq!(ep, expected);
    }

    /// `provision.ts` `permissionsFor` observer/admin arm, the `admin` branch.
    #[test]
    fn issued_profile_census_admin_view() {
        let p = view_profile(View::Admin, &view_binding(&["admin"])).unwrap();
        assert_eq!(p.name, "admin");
        assert_eq!(p.tags, tags());
        assert_eq!(p.ttl_seconds, 900);
        let mut publish = s(&[
            "$JS.API.INFO",
            "$JS.API.STREAM.INFO.CHAT_prod",
            "$JS.API.STREAM.INFO.KV_cotal_presence_prod",
            "$JS.API.CONSUMER.CREATE.CHAT_prod",
            "$JS.API.CONSUMER.CREATE.CHAT_prod.>",
            "$JS.API.CONSUMER.INFO.CHAT_prod.>",
            "$JS.API.CONSUMER.MSG.NEXT.CHAT_prod.>",
            "$JS.API.CONSUMER.DELETE.CHAT_prod.>",
            "$JS.ACK.CHAT_prod.>",
            "$JS.API.CONSUMER.CREATE.KV_cotal_presence_prod.>",
            "$JS.API.CONSUMER.INFO.KV_cotal_presence_prod.>",
            "$JS.API.CONSUMER.DELETE.KV_cotal_presence_prod.>",
        ]);
        for kv in ["KV_cotal_channels_prod", "KV_cotal_membership_prod"] {
            publish.extend([
                format!("$JS.API.STREAM.INFO.{kv}"),
                format!("$JS.API.STREAM.MSG.GET.{kv}"),
                format!("$JS.API.CONSUMER.CREATE.{kv}.>"),
                format!("$JS.API.CONSUMER.INFO.{kv}.>"),
                format!("$JS.API.CONSUMER.DELETE.{kv}.>"),
            ]);
        }
        publish.extend(s(&[
            "$JS.FC.>",
            "$JS.API.STREAM.INFO.DM_prod",
            "$JS.API.CONSUMER.CREATE.DM_prod",
            "$JS.API.CONSUMER.CREATE.DM_prod.>",
            "$JS.API.CONSUMER.INFO.DM_prod.>",
            "$JS.API.CONSUMER.MSG.NEXT.DM_prod.>",
            "$JS.API.CONSUMER.DELETE.DM_prod.>",
            "$JS.ACK.DM_prod.>",
        ]));
        assert_eq!(p.permissions.publish.allow, publish);
        assert_eq!(
            p.permissions.subscribe.allow,
            s(&[
                "cotal.prod.chat.>",
                "cotal.prod.inst.>",
                "cotal.prod.svc.>",
                INBOX
            ])
        );
    }

    /// `provision.ts` `purgerPermissions`.
    #[test]
    fn issued_profile_census_purger() {
        let p = view_profile(View::Purger, &view_binding(&["admin"])).unwrap();
        assert_eq!(p.name, "purger");
        assert_eq!(
            p.permissions.publish.allow,
            s(&[
                "$JS.API.INFO",
                "$JS.API.STREAM.PURGE.CHAT_prod",
                "$JS.API.STREAM.PURGE.DM_prod",
            ])
        );
        assert_eq!(p.permissions.subscribe.allow, s(&[INBOX]));
    }

    /// `provision.ts` `channelWriterPermissions`, less its `STREAM.CREATE` (the departure).
    #[test]
    fn issued_profile_census_channel_writer() {
        let p = view_profile(View::ChannelWriter, &view_binding(&["admin"])).unwrap();
        assert_eq!(p.name, "channel-writer");
        assert_eq!(
            p.permissions.publish.allow,
            s(&[
                "$JS.API.INFO",
                "$KV.cotal_channels_prod.>",
                "$JS.API.STREAM.INFO.KV_cotal_channels_prod",
                "$JS.API.STREAM.MSG.GET.KV_cotal_channels_prod",
                "$JS.API.DIRECT.GET.KV_cotal_channels_prod.>",
            ])
        );
        assert_eq!(p.permissions.subscribe.allow, s(&[INBOX]));
    }

    /// `provision.ts` `channelPurgerPermissions`.
    #[test]
    fn issued_profile_census_channel_purger() {
        let p = view_profile(View::ChannelPurger, &view_binding(&["admin"])).unwrap();
        assert_eq!(p.name, "channel-purger");
        assert_eq!(
            p.permissions.publish.allow,
            s(&[
                "$JS.API.INFO",
                "$KV.cotal_channels_prod.>",
                "$JS.API.STREAM.INFO.KV_cotal_channels_prod",
                "$JS.API.STREAM.MSG.GET.KV_cotal_channels_prod",
                "$JS.API.DIRECT.GET.KV_cotal_channels_prod.>",
                "$JS.API.STREAM.PURGE.CHAT_prod",
            ])
        );
        assert_eq!(p.permissions.subscribe.allow, s(&[INBOX]));
    }

    fn manager_caller_binding(issued: bool) -> ManagerCallerBinding {
        use cotal_core::issued::{AcceptedToken, IssuedGeneration};
        ManagerCallerBinding {
            view: view(),
            lifecycle_uid: uid(),
            instance: cotal_core::names::InstanceId::parse("iiiiiiiiiiiiiiiiiiiiiiiiii").unwrap(),
            issued: issued.then(|| CallerIssuance {
                generation: IssuedGeneration::parse("0123456789abcdef0123456789abcdef").unwrap(),
                accepted: AcceptedToken::for_connection(NONCE),
            }),
        }
    }

    /// F77: an issued `manager-caller` connection's request, describe and reply rows all ride
    /// `ep.v1` with the generation beside the caller triple, pinned to the one instance, plus
    /// the per-key read of its own accepted row and nothing else on that store.
    #[test]
    fn f77_an_issued_manager_caller_rides_the_v1_rail_with_its_generation() {
        let p = manager_caller(&manager_caller_binding(true)).unwrap();
        assert_eq!(p.name, "manager-caller");
        let c = "u_aaaaaaaaaaaaaaaaaaaaaaaaaa.alice.zyxwvutsrqponmlkjihgfedcba.0123456789abcdef0123456789abcdef";
        let i = "cotal.prod.ep.v1.inst.manager.iiiiiiiiiiiiiiiiiiiiiiiiii";
        let token = cotal_core::issued::AcceptedToken::for_connection(NONCE);
        assert_eq!(
            p.permissions.publish.allow,
            vec![
                format!("cotal.prod.ep.v1.one.*.describe.{c}.*"),
                "$JS.API.DIRECT.GET.EPC_prod.cotal.prod.epc.>".to_owned(),
                format!(
                    "$JS.API.DIRECT.GET.KV_cotal_accepted_prod.$KV.cotal_accepted_prod.accepted.v1.{token}"
                ),
                format!("{i}.status.{c}.*"),
                format!("{i}.ps.{c}.*"),
                format!("{i}.inspect.{c}.*"),
                format!("{i}.models.{c}.*"),
                format!("{i}.run-start.{c}.*"),
                format!("{i}.run-resume.{c}.*"),
                format!("{i}.run-answer.self.{c}.*"),
            ]
        );
        assert_eq!(
            p.permissions.subscribe.allow,
            vec![
                INBOX.to_owned(),
                format!("cotal.prod.ep.v1.reply.*.*.*.{c}.*")
            ]
        );
        assert!(p.permissions.publish.deny.is_empty());
    }

    /// A managed row's `manager-caller` view is no issuance: it keeps the legacy rail, so a
    /// `run-start` (which needs the binding, F81) cannot be published on the versioned one.
    #[test]
    fn f81_an_unissued_manager_caller_holds_no_v1_row() {
        let p = manager_caller(&manager_caller_binding(false)).unwrap();
        let rows = [p.permissions.publish.allow, p.permissions.subscribe.allow].concat();
        assert!(rows
            .iter()
            .all(|r| !r.contains(".ep.v1.") && !r.contains("accepted")));
        assert!(rows.contains(&format!(
            "cotal.prod.ep.inst.manager.iiiiiiiiiiiiiiiiiiiiiiiiii.run-start.u_aaaaaaaaaaaaaaaaaaaaaaaaaa.alice.{UID}.*"
        )));
    }

    /// `provision.ts` `deployerPermissions` at the privileged tier (the user-mode view of
    /// `permissions.ts`), with `instrumentEpRows` and an untargeted `launch`.
    #[test]
    fn issued_profile_census_deployer() {
        let p = view_profile(View::Deployer, &view_binding(&["spawn"])).unwrap();
        assert_eq!(p.name, "deployer");
        let c = "u_aaaaaaaaaaaaaaaaaaaaaaaaaa.alice.zyxwvutsrqponmlkjihgfedcba";
        let mut publish = s(&["$JS.API.INFO"]);
        for kv in [
            "KV_cotal_presence_prod",
            "KV_cotal_channels_prod",
            "KV_cotal_membership_prod",
        ] {
            publish.extend([
                format!("$JS.API.STREAM.INFO.{kv}"),
                format!("$JS.API.STREAM.MSG.GET.{kv}"),
                format!("$JS.API.DIRECT.GET.{kv}.>"),
                format!("$JS.API.CONSUMER.CREATE.{kv}.>"),
                format!("$JS.API.CONSUMER.INFO.{kv}.>"),
            ]);
        }
        for kv in ["KV_cotal_manager_prod", "KV_cotal_delivery_prod"] {
            publish.extend([
                format!("$JS.API.STREAM.INFO.{kv}"),
                format!("$JS.API.STREAM.MSG.GET.{kv}"),
                format!("$JS.API.DIRECT.GET.{kv}.>"),
            ]);
        }
        publish.extend([
            "$JS.FC.>".to_owned(),
            format!("cotal.prod.ep.one.*.describe.{c}.*"),
            "$JS.API.DIRECT.GET.EPC_prod.cotal.prod.epc.>".to_owned(),
            format!("cotal.prod.ep.one.manager.status.{c}.*"),
            format!("cotal.prod.ep.one.manager.ps.{c}.*"),
            format!("cotal.prod.ep.all.manager.ps.{c}.*"),
            format!("cotal.prod.ep.one.manager.inspect.{c}.*"),
            format!("cotal.prod.ep.one.manager.models.{c}.*"),
            format!("cotal.prod.ep.one.manager.spawn.{c}.*"),
            format!("cotal.prod.ep.one.manager.define-persona.{c}.*"),
            format!("cotal.prod.ep.one.manager.launch.{c}.*"),
        ]);
        assert_eq!(p.permissions.publish.allow, publish);
        assert_eq!(
            p.permissions.subscribe.allow,
            vec![
                INBOX.to_owned(),
                format!("cotal.prod.ep.reply.*.*.*.{c}.*"),
                format!("cotal.prod.epe.manager.*.*.goal.{c}.>"),
            ]
        );
    }

    // ---- refusals ---------------------------------------------------------------------------

    /// `subjects.ts` `assertInboxConnId`: `[A-Za-z0-9_-]{8,120}`; the callout-shape cell
    /// "wildcard nonce `>` refused".
    #[test]
    fn auth_callout_wildcard_nonce_refused() {
        for bad in [
            ">",
            "*",
            "a.b",
            "",
            "ibx.NONCE01",
            "ibx NONCE01",
            "ibx>NONCE",
            "short",
        ] {
            let e = ConnId::parse(bad).unwrap_err();
            assert_eq!(e.code, ErrorCode::BadRequest, "{bad:?}");
        }
        assert!(ConnId::parse(NONCE).is_ok());
    }

    /// `subjects.ts` `assertValidChannel`, re-asserted at the mint chokepoint.
    #[test]
    fn agent_refuses_a_channel_that_is_not_a_subject_pattern() {
        for bad in ["", "a..b", ".a", "a.", "a.>.b", "a/b", "team.*x", "a b"] {
            for (sub, publ) in [
                (vec![bad.to_owned()], vec![]),
                (vec![], vec![bad.to_owned()]),
            ] {
                let b = AgentBinding {
                    allow_subscribe: sub,
                    allow_publish: publ,
                    ..binding()
                };
                let e = agent(&b).unwrap_err();
                assert_eq!(e.code, ErrorCode::BadRequest, "{bad:?}");
            }
        }
    }

    #[test]
    fn agent_refuses_a_role_that_is_not_a_token() {
        for bad in ["", "a.b", "*", ">", "a b"] {
            let b = AgentBinding {
                role: Some(bad.to_owned()),
                ..binding()
            };
            assert_eq!(
                agent(&b).unwrap_err().code,
                ErrorCode::BadRequest,
                "{bad:?}"
            );
        }
    }

    /// `permissions.ts` `assertDerivedOwnerToken`: user mode never mints for `local`.
    #[test]
    fn callout_permissions_refuse_a_non_derived_owner() {
        let local = Principal::new(OwnerToken::local(), ActorToken::parse("alice").unwrap());
        let b = AgentBinding {
            principal: local.clone(),
            ..binding()
        };
        assert_eq!(agent(&b).unwrap_err().code, ErrorCode::PermissionDenied);
        let v = ConnectViewBinding {
            view: ViewBinding {
                principal: local,
                ..view()
            },
            ..view_binding(&["admin"])
        };
        assert_eq!(
            view_profile(View::Purger, &v).unwrap_err().code,
            ErrorCode::PermissionDenied
        );
    }

    /// reference-auth-service §10.1: manager-service "can never be a connect profile".
    #[test]
    fn manager_service_is_not_a_connect_profile() {
        let all = view_binding(&["admin", "spawn", "supervise"]);
        let e = view_profile(View::ManagerService, &all).unwrap_err();
        assert_eq!(e.code, ErrorCode::PermissionDenied);
        assert!(e.message.contains("not a generic profile"), "{}", e.message);
        for view in [
            View::ManagerCaller,
            View::SessionCaller,
            View::TransferWriter,
        ] {
            let e = view_profile(view, &all).unwrap_err();
            assert_eq!(e.code, ErrorCode::BadRequest, "{view}");
        }
        for view in [
            View::Admin,
            View::Purger,
            View::ChannelPurger,
            View::ChannelWriter,
            View::Deployer,
        ] {
            assert_eq!(view_profile(view, &all).unwrap().name, view.as_str());
        }
    }

    /// `permissions.ts`: "the bearer's own capability list must carry the view's required scope,
    /// or nothing is minted" (`VIEW_REQUIRED_SCOPE`: deployer → spawn, the rest → admin).
    #[test]
    fn view_without_its_required_scope_is_minted_nothing() {
        for view in [
            View::Admin,
            View::Purger,
            View::ChannelPurger,
            View::ChannelWriter,
        ] {
            assert_eq!(view.required_scope(), Some("admin"));
            let e = view_profile(view, &view_binding(&["spawn"])).unwrap_err();
            assert_eq!(e.code, ErrorCode::PermissionDenied);
        }
        assert_eq!(View::Deployer.required_scope(), Some("spawn"));
        let e = view_profile(View::Deployer, &view_binding(&["admin"])).unwrap_err();
        assert_eq!(e.code, ErrorCode::PermissionDenied);
    }

    /// Every connect profile (the `agent` profile and each view) carries the finite
    /// [`CONNECT_LIMITS`] into its JWT claims: no bearer-held connection is unlimited in
    /// subscriptions, data or payload.
    #[test]
    fn every_connect_profile_carries_finite_limits() {
        let mut profiles = vec![agent(&binding()).unwrap()];
        for view in [
            View::Admin,
            View::Purger,
            View::ChannelPurger,
            View::ChannelWriter,
        ] {
            profiles.push(view_profile(view, &view_binding(&["admin"])).unwrap());
        }
        profiles.push(view_profile(View::Deployer, &view_binding(&["spawn"])).unwrap());
        profiles.push(manager_caller(&manager_caller_binding(true)).unwrap());
        let limits = CONNECT_LIMITS;
        assert!(limits.subs > 0 && limits.data > 0 && limits.payload > 0);
        for p in &profiles {
            let (nats, _) = p.claims(UnixSeconds(NOW)).unwrap();
            assert_eq!(nats.limits, limits, "{}", p.name);
        }
    }

    /// §8.2 "`exp` = the bearer's `exp`": the claims of a profile issued at `now` expire with the
    /// bearer; an expired bearer gets no lifetime at all.
    #[test]
    fn auth_callout_minted_exp_equals_bearer_exp() {
        let p = agent(&binding()).unwrap();
        let (_, validity) = p.claims(UnixSeconds(NOW)).unwrap();
        assert_eq!(validity.expires_at, Some(UnixSeconds(EXP)));
        for exp in [NOW, NOW - 1] {
            let e = ConnectTtl::until(UnixSeconds(NOW), UnixSeconds(exp)).unwrap_err();
            assert_eq!(e.code, ErrorCode::PermissionDenied);
        }
        let far = NOW + CONNECT_TTL_MAX_SECS + 1;
        assert!(ConnectTtl::until(UnixSeconds(NOW), UnixSeconds(far)).is_err());
        assert_eq!(
            ConnectTtl::until(UnixSeconds(NOW), UnixSeconds(NOW + 1))
                .unwrap()
                .seconds(),
            1
        );
    }

    // ---- confinement ------------------------------------------------------------------------

    fn agent_with(scope: &[&str]) -> Profile {
        agent(&AgentBinding {
            scope: s(scope),
            ..binding()
        })
        .unwrap()
    }

    /// SPEC §13.1: every lifecycle-keyed name carries this lifecycle's uid; no row names
    /// another lifecycle's mailbox or history consumer, and none spans mailboxes by wildcard.
    #[test]
    fn agent_rows_never_reach_another_lifecycle() {
        for scope in [&[][..], &["spawn"], &["admin"], &["spawn", "admin"]] {
            let p = agent_with(scope);
            for row in all_rows(&p) {
                assert!(!row.contains(OTHER_UID), "{row}");
                for family in ["dm_", "dlv_", "chathist_"] {
                    if let Some(i) = row.find(&format!(".{family}")) {
                        let name = &row[i + 1..];
                        assert!(
                            name.starts_with(&format!(
                                "{family}u_aaaaaaaaaaaaaaaaaaaaaaaaaa-alice-{UID}"
                            )),
                            "{row}"
                        );
                    }
                }
                for stream in ["DM_prod", "DLV_prod", "TASK_prod", "INBOX_prod"] {
                    assert!(!row.contains(&format!("{stream}.>")), "{row}");
                    assert!(!row.contains(&format!("{stream}.*")), "{row}");
                }
            }
        }
    }

    /// F98 and SPEC §8: no `$KV.>`, no bucket-wide `$KV`, no stream administration, nothing on
    /// the auth, records, sessions or admission stores, no mailbox create.
    #[test]
    fn agent_rows_hold_no_store_or_stream_authority() {
        for scope in [&[][..], &["spawn", "admin"]] {
            let p = agent_with(scope);
            for row in &p.permissions.publish.allow {
                assert!(!row.starts_with("$KV.>"), "{row}");
                if let Some(kv) = row.strip_prefix("$KV.") {
                    assert_eq!(
                        kv, "cotal_presence_prod.u_aaaaaaaaaaaaaaaaaaaaaaaaaa.alice",
                        "only its own presence key"
                    );
                }
                for verb in [
                    "STREAM.CREATE",
                    "STREAM.DELETE",
                    "STREAM.PURGE",
                    "STREAM.UPDATE",
                ] {
                    assert!(!row.contains(verb), "{row}");
                }
                for store in [
                    "cotal_auth_",
                    "cotal_records_",
                    "cotal_sessions_",
                    "cotal_admission_",
                ] {
                    assert!(!row.contains(store), "{row}");
                }
                assert!(!row.contains("CONSUMER.DURABLE.CREATE"), "{row}");
                if row.contains("CONSUMER.CREATE") {
                    let watch = [
                        "$JS.API.CONSUMER.CREATE.KV_cotal_presence_prod.>",
                        "$JS.API.CONSUMER.CREATE.KV_cotal_channels_prod.>",
                    ];
                    assert!(
                        watch.contains(&row.as_str())
                            || row.starts_with(&format!(
                                "$JS.API.CONSUMER.CREATE.CHAT_prod.chathist_u_aaaaaaaaaaaaaaaaaaaaaaaaaa-alice-{UID}.cotal.prod.chat.*.*."
                            )),
                        "only the public registries' watches and the history consumer, \
                         filter pinned: {row}"
                    );
                }
            }
        }
    }

    /// The inbox rows of every connect profile name this connection's nonce and no other, and
    /// no profile subscribes the account-wide `_INBOX.>` or a `>` at the space root.
    #[test]
    fn connect_profiles_never_reach_another_connections_inbox() {
        let mut profiles = vec![agent_with(&["spawn", "admin"])];
        for (view, scope) in [
            (View::Admin, "admin"),
            (View::Purger, "admin"),
            (View::ChannelPurger, "admin"),
            (View::ChannelWriter, "admin"),
            (View::Deployer, "spawn"),
        ] {
            profiles.push(view_profile(view, &view_binding(&[scope])).unwrap());
        }
        for p in &profiles {
            for row in all_rows(p) {
                if row.starts_with("_INBOX") {
                    assert_eq!(row, INBOX, "{}", p.name);
                }
                assert_ne!(row, ">");
                assert_ne!(row, "cotal.prod.>");
                assert!(!row.starts_with("$JS.API.>") && row != "$JS.>", "{row}");
            }
            assert!(p.permissions.subscribe.allow.contains(&INBOX.to_owned()));
        }
    }

    /// Each view's reference cell and nothing broader: no view posts on a `cotal.` subject, only
    /// `admin` reads a DM and taps the live planes, only the purgers purge, only the channel
    /// views write a KV key, only `deployer` calls an endpoint, and none reaches an `ep*`
    /// serve or record plane.
    #[test]
    fn view_profiles_grant_their_cell_and_nothing_broader() {
        let cases = [
            (View::Admin, "admin"),
            (View::Purger, "admin"),
            (View::ChannelPurger, "admin"),
            (View::ChannelWriter, "admin"),
            (View::Deployer, "spawn"),
        ];
        for (view, scope) in cases {
            let p = view_profile(view, &view_binding(&[scope])).unwrap();
            let publish = &p.permissions.publish.allow;
            let posts: Vec<&String> = publish
                .iter()
                .filter(|r| {
                    r.starts_with("cotal.")
                        && !r.starts_with("cotal.prod.ep.one.")
                        && !r.starts_with("cotal.prod.ep.all.")
                })
                .collect();
            assert!(posts.is_empty(), "{}: {posts:?}", p.name);
            let calls = publish.iter().any(|r| r.starts_with("cotal.prod.ep."));
            assert_eq!(calls, view == View::Deployer, "{}", p.name);
            let reads_dm = publish
                .iter()
                .any(|r| r.contains("DM_prod") && !r.contains("PURGE"));
            assert_eq!(reads_dm, view == View::Admin, "{}", p.name);
            let purges = publish.iter().any(|r| r.contains("STREAM.PURGE"));
            assert_eq!(
                purges,
                matches!(view, View::Purger | View::ChannelPurger),
                "{}",
                p.name
            );
            let writes_kv = publish.iter().any(|r| r.starts_with("$KV."));
            assert_eq!(
                writes_kv,
                matches!(view, View::ChannelPurger | View::ChannelWriter),
                "{}",
                p.name
            );
            for row in all_rows(&p) {
                for verb in [
                    "STREAM.CREATE",
                    "STREAM.DELETE",
                    "STREAM.UPDATE",
                    "CONSUMER.DURABLE",
                ] {
                    assert!(!row.contains(verb), "{}: {row}", p.name);
                }
                for store in [
                    "cotal_auth_",
                    "cotal_records_",
                    "cotal_sessions_",
                    "cotal_admission_",
                ] {
                    assert!(!row.contains(store), "{}: {row}", p.name);
                }
                for plane in [
                    ".epf.",
                    ".epj.",
                    ".ept.",
                    ".epr.",
                    ".epw.",
                    ".eps.",
                    ".ep.inst.",
                ] {
                    assert!(!row.contains(plane), "{}: {row}", p.name);
                }
                assert!(!row.contains(".any."), "no cross-owner row: {row}");
            }
            let taps: Vec<&String> = p
                .permissions
                .subscribe
                .allow
                .iter()
                .filter(|r| {
                    r.ends_with(".>") && r.starts_with("cotal.prod.") && !r.contains(".goal.")
                })
                .collect();
            if view == View::Admin {
                assert_eq!(taps.len(), 3);
            } else {
                assert!(taps.is_empty(), "{}: {taps:?}", p.name);
            }
        }
    }

    proptest! {
        /// For any valid channel lists and nonce, the agent's rows keep one lifecycle, one
        /// inbox, and post only on its own sender slots.
        #[test]
        fn agent_confinement_holds_for_any_acl(
            sub in proptest::collection::vec("[a-z]{1,6}(\\.[a-z]{1,6}){0,2}(\\.>)?", 0..4),
            publ in proptest::collection::vec("[a-z]{1,6}(\\.\\*)?", 0..4),
            nonce in "[A-Za-z0-9_-]{8,40}",
        ) {
            let b = AgentBinding {
                allow_subscribe: sub,
                allow_publish: publ,
                conn_nonce: ConnId::parse(&nonce).unwrap(),
                ..binding()
            };
            let p = agent(&b).unwrap();
            let inbox = format!("_INBOX_{nonce}.>");
            for row in &p.permissions.subscribe.allow {
                if row.starts_with("_INBOX") {
                    prop_assert_eq!(row, &inbox);
                }
            }
            for row in &p.permissions.publish.allow {
                if let Some(rest) = row.strip_prefix("cotal.prod.chat.") {
                    prop_assert!(rest.starts_with("u_aaaaaaaaaaaaaaaaaaaaaaaaaa.alice."), "{}", row);
                }
                prop_assert!(!row.starts_with("$KV.>"));
                prop_assert!(!row.contains("STREAM.CREATE"));
            }
        }
    }
}
