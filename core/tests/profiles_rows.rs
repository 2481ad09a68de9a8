//! The permission profiles the plane mints: the exact allow lists (in emission order), tags and
//! lifetimes of every profile, plus property checks named after the fence rules they keep
//! (F39 epoch-pinned egress, F70 queue-qualified serve rows, no cross-command `>`, F98 auth
//! bucket, standing TTL bounds).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

#[cfg(test)]
mod profiles {
    use cotal_core::gate::{NameAuthorityRevision, ProcessEpoch, RegistrationRevision};
    use cotal_core::issuance::ServeGrant;
    use cotal_core::names::{
        ActorToken, CommandToken, EndpointName, InstanceId, LifecycleUid, OwnerToken, Principal,
        SpaceName,
    };
    use cotal_core::profiles::*;
    use cotal_core::ErrorCode;
    use proptest::prelude::*;

    const P: &str = "cotal.prod";
    const E: &str = "com_acme_deploy";
    const IID: &str = "0123456789abcdefghijklmnop";
    const OWNER: &str = "u_aaaaaaaaaaaaaaaaaaaaaaaaaa";
    const CONN: &str = "UCONN234567ABCDEF";
    const INBOX: &str = "_INBOX_UCONN234567ABCDEF.>";
    const UID: &str = "zyxwvutsrqponmlkjihgfedcba";
    const TUID: &str = "tttttttttttttttttttttttttt";

    fn space() -> SpaceName {
        SpaceName::parse("prod").unwrap()
    }
    fn endpoint() -> EndpointName {
        EndpointName::parse("com.acme.deploy").unwrap()
    }
    fn iid() -> InstanceId {
        InstanceId::parse(IID).unwrap()
    }
    fn owner() -> OwnerToken {
        OwnerToken::parse(OWNER).unwrap()
    }
    fn actor(a: &str) -> ActorToken {
        ActorToken::parse(a).unwrap()
    }
    fn principal(a: &str) -> Principal {
        Principal::new(owner(), actor(a))
    }
    fn conn() -> ConnId {
        ConnId::parse(CONN).unwrap()
    }
    fn tags(a: &str) -> Vec<String> {
        vec![
            format!("owner:{OWNER}"),
            format!("actor:{a}"),
            format!("principal:{OWNER}.{a}"),
        ]
    }
    fn rows(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }
    fn cmd(c: &str) -> CommandToken {
        CommandToken::parse(c).unwrap()
    }

    fn grant(epoch: u64) -> ServeGrant {
        ServeGrant {
            space: space(),
            endpoint: endpoint(),
            instance: iid(),
            owner: owner(),
            epoch: ProcessEpoch(epoch),
            registration_revision: RegistrationRevision(3),
            name_authority_revision: NameAuthorityRevision(1),
        }
    }

    fn serve_binding(epoch: u64, commands: &[&str], journal: bool, pools: &[&str]) -> ServeBinding {
        ServeBinding {
            grant: grant(epoch),
            actor: actor("deployer"),
            conn: conn(),
            rail_commands: commands.iter().map(|c| cmd(c)).collect(),
            journal_class: journal,
            pools: pools.iter().map(|p| PoolToken::parse(p).unwrap()).collect(),
            ttl: StandingTtl::DEFAULT,
        }
    }

    fn caller(a: &str, uid: &str) -> RailCaller {
        RailCaller {
            owner: owner(),
            actor: actor(a),
            uid: LifecycleUid::parse(uid).unwrap(),
        }
    }

    fn run_binding() -> RunBinding {
        RunBinding {
            space: space(),
            owner: owner(),
            conn: conn(),
            endpoint: EndpointName::parse("manager").unwrap(),
            run: RunId::parse("run-0123456789abcdef0123456789abcdef").unwrap(),
            takeover: TakeoverId::parse("00ff00ff00ff00ff").unwrap(),
            instance: iid(),
            epoch: ProcessEpoch(4),
            ttl: StandingTtl::new(3600).unwrap(),
        }
    }

    /// One of every profile, for the properties that hold across all of them.
    fn every_profile() -> Vec<Profile> {
        vec![
            endpoint_serve(&serve_binding(7, &["deploy", "status"], true, &["hot"])).unwrap(),
            goal_writer(&GoalWriterBinding {
                space: space(),
                principal: principal("manager_goal_x"),
                conn: conn(),
                endpoint: endpoint(),
                ttl: StandingTtl::DEFAULT,
            })
            .unwrap(),
            session_ledger(&SessionLedgerBinding {
                space: space(),
                principal: principal("ledger"),
                conn: conn(),
                ttl: StandingTtl::DEFAULT,
            })
            .unwrap(),
            remote_manager(&RemoteManagerBinding {
                space: space(),
                owner: owner(),
                instance: iid(),
                conn: conn(),
                role: ManagerRole::Supervisor(StandingTtl::DEFAULT),
            })
            .unwrap(),
            remote_manager(&RemoteManagerBinding {
                space: space(),
                owner: owner(),
                instance: iid(),
                conn: conn(),
                role: ManagerRole::Executor,
            })
            .unwrap(),
            run_driver(&run_binding()).unwrap(),
            run_mediator(&run_binding()).unwrap(),
            run_operator(&RunOperatorBinding {
                space: space(),
                principal: principal("cli"),
                conn: conn(),
                endpoint: EndpointName::parse("manager").unwrap(),
                takeover: TakeoverId::parse("tk1").unwrap(),
                scope: RunOperatorScope::Status(RunId::parse("run-1").unwrap()),
            })
            .unwrap(),
            run_admitter(&RunAdmitterBinding {
                space: space(),
                principal: principal("cli"),
                conn: conn(),
                endpoint: EndpointName::parse("manager").unwrap(),
                run: RunId::parse("run-1").unwrap(),
            })
            .unwrap(),
            retirement_requester(&RetirementRequesterBinding {
                space: space(),
                caller: caller("manager_serve_x", UID),
                conn: conn(),
                target: caller("agent7", TUID),
            })
            .unwrap(),
            provisioner(&ProvisionerBinding {
                space: space(),
                principal: principal("provisioner"),
                conn: conn(),
            })
            .unwrap(),
            deprovisioner(&DeprovisionerBinding {
                space: space(),
                principal: principal("manager_serve_x"),
                conn: conn(),
                target: principal("agent7"),
                target_uid: LifecycleUid::parse(TUID).unwrap(),
                member_channels: vec![Channel::parse("team.backend").unwrap()],
            })
            .unwrap(),
            registration_executor(&RegistrationExecutorBinding {
                space: space(),
                principal: principal("auth_reg"),
                conn: conn(),
                endpoint: endpoint(),
                instance: iid(),
                window: ExecutorWindow::Registration,
            })
            .unwrap(),
        ]
    }

    /// NATS subject matching: `*` one token, `>` one or more trailing tokens.
    fn matches(pattern: &str, subject: &str) -> bool {
        let p: Vec<&str> = pattern.split('.').collect();
        let s: Vec<&str> = subject.split('.').collect();
        for (i, tok) in p.iter().enumerate() {
            if *tok == ">" {
                return s.len() > i;
            }
            match s.get(i) {
                Some(t) if *tok == "*" || tok == t => {}
                _ => return false,
            }
        }
        p.len() == s.len()
    }

    /// The application tokens of a row under `P.` (queue group stripped), if it is one.
    fn app_tokens(row: &str) -> Option<Vec<&str>> {
        let subject = row.split(' ').next().unwrap();
        subject
            .strip_prefix(&format!("{P}."))
            .map(|t| t.split('.').collect())
    }

    /// Every host profile carries the finite [`HOST_LIMITS`] into its JWT claims, and so does a
    /// plane-held connection's bare grant ([`host_user`]): no user JWT the plane mints for
    /// itself or its hosts is unlimited.
    #[test]
    fn every_host_profile_carries_finite_limits() {
        let limits = HOST_LIMITS;
        assert!(limits.subs > 0 && limits.data > 0 && limits.payload > 0);
        for p in every_profile() {
            let (nats, _) = p
                .claims(cotal_core::jwt::UnixSeconds(1_700_000_000))
                .unwrap();
            assert_eq!(nats.limits, limits, "{}", p.name);
        }
        assert_eq!(host_user(Default::default()).limits, limits);
    }

    // ---- exact rows -------------------------------------------------------------------------

    #[test]
    fn endpoint_serve_exact_rows() {
        let pr = endpoint_serve(&serve_binding(7, &["status", "deploy"], true, &["hot"])).unwrap();
        assert_eq!(pr.name, "endpoint-serve");
        assert_eq!(pr.tags, tags("deployer"));
        assert_eq!(pr.ttl_seconds, 86_400);
        let mut sub = Vec::new();
        for c in ["deploy", "status", "describe"] {
            for rail in ["ep", "ep.v1"] {
                sub.push(format!("{P}.{rail}.one.{E}.{c}.> {E}"));
                sub.push(format!("{P}.{rail}.all.{E}.{c}.>"));
                sub.push(format!("{P}.{rail}.inst.{E}.{IID}.{c}.>"));
            }
        }
        sub.push(format!("{P}.ept.{E}.{IID}.7.*.fire"));
        sub.push(INBOX.to_owned());
        assert_eq!(pr.permissions.subscribe.allow, sub);
        assert_eq!(
            pr.permissions.publish.allow,
            vec![
                format!("{P}.ep.reply.{E}.{IID}.7.*.*.*.*"),
                format!("{P}.ep.v1.reply.{E}.{IID}.7.*.*.*.*.*"),
                format!("{P}.epe.{E}.{IID}.7.>"),
                format!("{P}.ept.{E}.{IID}.7.*.schedule"),
                format!("{P}.epr.{E}.{IID}.7.>"),
                format!("$JS.API.CONSUMER.INFO.EPF_prod.eff_{E}"),
                format!("$JS.API.CONSUMER.MSG.NEXT.EPF_prod.eff_{E}"),
                format!("$JS.ACK.EPF_prod.eff_{E}.>"),
                format!("$JS.API.CONSUMER.INFO.EPW_prod.pool_{E}_hot"),
                format!("$JS.API.CONSUMER.MSG.NEXT.EPW_prod.pool_{E}_hot"),
                format!("$JS.ACK.EPW_prod.pool_{E}_hot.>"),
                "$JS.API.INFO".to_owned(),
            ]
        );
        assert!(pr.permissions.publish.deny.is_empty());
        assert!(pr.permissions.subscribe.deny.is_empty());
        assert_eq!(pr.permissions.response, None);
    }

    #[test]
    fn endpoint_serve_without_binds_has_no_jetstream_rows() {
        let pr = endpoint_serve(&serve_binding(0, &[], false, &[])).unwrap();
        assert_eq!(
            pr.permissions.publish.allow,
            vec![
                format!("{P}.ep.reply.{E}.{IID}.0.*.*.*.*"),
                format!("{P}.ep.v1.reply.{E}.{IID}.0.*.*.*.*.*"),
                format!("{P}.epe.{E}.{IID}.0.>"),
                format!("{P}.ept.{E}.{IID}.0.*.schedule"),
                format!("{P}.epr.{E}.{IID}.0.>"),
            ]
        );
        // A journal-only endpoint still serves the derived describe.
        assert_eq!(pr.permissions.subscribe.allow.len(), 6 + 2);
        assert_eq!(
            pr.permissions.subscribe.allow[0],
            format!("{P}.ep.one.{E}.describe.> {E}")
        );
    }

    #[test]
    fn endpoint_serve_refuses_a_listed_describe() {
        let err = endpoint_serve(&serve_binding(1, &["describe"], false, &[])).unwrap_err();
        assert_eq!(err.code, ErrorCode::BadRequest);
        assert!(err.message.contains("reserved"), "{}", err.message);
    }

    #[test]
    fn endpoint_serve_dedupes_commands_and_pools() {
        let once = endpoint_serve(&serve_binding(2, &["a"], false, &["p"])).unwrap();
        let twice = endpoint_serve(&serve_binding(2, &["a", "a"], false, &["p", "p"])).unwrap();
        assert_eq!(once, twice);
    }

    #[test]
    fn goal_writer_exact_rows() {
        let pr = goal_writer(&GoalWriterBinding {
            space: space(),
            principal: principal("manager_goal_x"),
            conn: conn(),
            endpoint: endpoint(),
            ttl: StandingTtl::new(600).unwrap(),
        })
        .unwrap();
        assert_eq!(pr.name, "goal-writer");
        assert_eq!(pr.tags, tags("manager_goal_x"));
        assert_eq!(pr.ttl_seconds, 600);
        assert_eq!(
            pr.permissions.publish.allow,
            vec![
                format!("{P}.epf.{E}.goal.*.*.*.*.bind"),
                format!("$KV.cotal_records_prod.goalidx.{E}.>"),
                "$JS.API.STREAM.MSG.GET.KV_cotal_auth_prod".to_owned(),
                format!("{P}.epf.{E}.goal.*.*.*.*.result"),
                format!("{P}.epf.{E}.goal.*.*.*.*.result.*"),
                format!("{P}.epf.{E}.eff.>"),
                format!("{P}.epf.{E}.receipt.>"),
                format!("{P}.epf.{E}.wrk.>"),
                format!("{P}.epf.{E}.cp.>"),
                format!("$KV.cotal_records_prod.goal.{E}.>"),
                format!("$KV.cotal_records_prod.cp.{E}.>"),
                format!("$KV.cotal_records_prod.lease.{E}.>"),
                "$JS.API.STREAM.MSG.GET.EPF_prod".to_owned(),
                "$JS.API.STREAM.MSG.GET.KV_cotal_records_prod".to_owned(),
                "$JS.API.INFO".to_owned(),
            ]
        );
        assert_eq!(pr.permissions.subscribe.allow, rows(&[INBOX]));
    }

    #[test]
    fn session_ledger_exact_rows() {
        let pr = session_ledger(&SessionLedgerBinding {
            space: space(),
            principal: principal("manager_session_x"),
            conn: conn(),
            ttl: StandingTtl::DEFAULT,
        })
        .unwrap();
        assert_eq!(pr.name, "session-ledger");
        assert_eq!(pr.tags, tags("manager_session_x"));
        assert_eq!(pr.ttl_seconds, 86_400);
        assert_eq!(
            pr.permissions.publish.allow,
            rows(&[
                "$KV.cotal_sessions_prod.session.*",
                "$JS.API.STREAM.MSG.GET.KV_cotal_sessions_prod",
                "$JS.API.STREAM.INFO.KV_cotal_sessions_prod",
                "$JS.API.INFO",
            ])
        );
        assert_eq!(pr.permissions.subscribe.allow, rows(&[INBOX]));
    }

    /// The reference's `remote-manager` rows; `executor` adds the instance-scoped registration
    /// surface on the auth bucket (rows 4, 5 and 8 of the profile's table), whose consumer create
    /// is pinned to the instance's own family.
    fn remote_manager_publish(actor: &str, executor: bool) -> Vec<String> {
        let rec = "cotal_records_prod";
        let auth = "cotal_auth_prod";
        let mut rows = vec![
            "$JS.API.INFO".to_owned(),
            "$JS.API.STREAM.INFO.KV_cotal_manager_prod".to_owned(),
            "$JS.API.STREAM.MSG.GET.KV_cotal_manager_prod".to_owned(),
            format!("$KV.cotal_manager_prod.lease.{IID}"),
            format!("$KV.cotal_presence_prod.{OWNER}.{actor}"),
            "$JS.API.STREAM.INFO.KV_cotal_presence_prod".to_owned(),
            "$JS.API.CONSUMER.CREATE.KV_cotal_presence_prod.>".to_owned(),
            "$JS.API.CONSUMER.INFO.KV_cotal_presence_prod.>".to_owned(),
            "$JS.FC.>".to_owned(),
        ];
        if executor {
            rows.extend([
                format!("$KV.{auth}.epgate.manager.{IID}"),
                format!("$KV.{auth}.eprepair.manager.{IID}"),
                format!("$KV.{auth}.epcred.manager.{IID}.>"),
            ]);
        }
        rows.extend([
            format!("$KV.{rec}.svc.manager.{IID}.spec"),
            format!("$KV.{rec}.svc.manager.{IID}.status"),
            format!("$KV.{rec}.govern.manager"),
            format!("{P}.epc.*"),
            format!("$JS.API.DIRECT.GET.EPC_prod.{P}.epc.>"),
            "$JS.API.DIRECT.GET.EPC_prod".to_owned(),
        ]);
        if executor {
            rows.extend([
                format!("$JS.API.STREAM.MSG.GET.KV_{auth}"),
                format!("$JS.API.CONSUMER.CREATE.KV_{auth}.*.$KV.{auth}.epcred.manager.{IID}.>"),
                format!("$JS.API.CONSUMER.INFO.KV_{auth}.>"),
                format!("$JS.API.CONSUMER.DELETE.KV_{auth}.>"),
            ]);
        }
        rows.extend([
            format!("$JS.API.DIRECT.GET.KV_{rec}.$KV.{rec}.svc.manager.{IID}.spec"),
            format!("$JS.API.DIRECT.GET.KV_{rec}.$KV.{rec}.svc.manager.{IID}.status"),
            format!("$JS.API.DIRECT.GET.KV_{rec}.$KV.{rec}.govern.manager"),
            format!("$JS.API.STREAM.MSG.GET.KV_{rec}"),
        ]);
        rows
    }

    #[test]
    fn remote_manager_supervisor_exact_rows() {
        let pr = remote_manager(&RemoteManagerBinding {
            space: space(),
            owner: owner(),
            instance: iid(),
            conn: conn(),
            role: ManagerRole::Supervisor(StandingTtl::new(7200).unwrap()),
        })
        .unwrap();
        let a = format!("manager_{IID}");
        assert_eq!(pr.name, "remote-manager");
        assert_eq!(pr.tags, tags(&a));
        assert_eq!(pr.ttl_seconds, 7200);
        assert_eq!(
            pr.permissions.publish.allow,
            remote_manager_publish(&a, false)
        );
        assert_eq!(pr.permissions.subscribe.allow, rows(&[INBOX]));
    }

    #[test]
    fn remote_manager_executor_exact_rows() {
        let pr = remote_manager(&RemoteManagerBinding {
            space: space(),
            owner: owner(),
            instance: iid(),
            conn: conn(),
            role: ManagerRole::Executor,
        })
        .unwrap();
        let a = format!("manager_exec_{IID}");
        assert_eq!(pr.tags, tags(&a));
        assert_eq!(pr.ttl_seconds, 300);
        assert_eq!(
            pr.permissions.publish.allow,
            remote_manager_publish(&a, true)
        );
        assert_eq!(
            remote_manager_actor(ManagerRole::Executor, &iid())
                .unwrap()
                .as_str(),
            a
        );
    }

    #[test]
    fn run_driver_caller_is_derived_from_the_run_id() {
        let b = run_binding();
        let c = run_driver_caller(&b.run, &b.owner).unwrap();
        // sha256("run-0123456789abcdef0123456789abcdef") computed independently (Python
        // hashlib): hex[0..12] names the actor, hex[12..38] is the uid.
        assert_eq!(c.owner, owner());
        assert_eq!(c.actor.as_str(), "wf_cbde062663ff");
        assert_eq!(c.uid.as_str(), "7c9c7bc613d1227cf916d36c9d");
        let other = run_driver_caller(&RunId::parse("run-2").unwrap(), &b.owner).unwrap();
        assert_ne!(other.actor, c.actor);
        assert_ne!(other.uid, c.uid);
    }

    #[test]
    fn run_driver_exact_rows() {
        let b = run_binding();
        let c = run_driver_caller(&b.run, &b.owner).unwrap();
        let pr = run_driver(&b).unwrap();
        let run = "run-0123456789abcdef0123456789abcdef";
        let d = format!("wfj_{run}_00ff00ff00ff00ff");
        let rec = "cotal_records_prod";
        assert_eq!(pr.name, "run-driver");
        assert_eq!(pr.tags, tags(c.actor.as_str()));
        assert_eq!(pr.ttl_seconds, 3600);
        assert_eq!(
            pr.permissions.publish.allow,
            vec![
                format!("{P}.wfj.{run}"),
                format!("$JS.API.CONSUMER.CREATE.WFJ_prod.{d}.{P}.wfj.{run}"),
                format!("$JS.API.CONSUMER.INFO.WFJ_prod.{d}"),
                format!("$JS.API.CONSUMER.MSG.NEXT.WFJ_prod.{d}"),
                format!("$JS.ACK.WFJ_prod.{d}.>"),
                format!("$JS.API.CONSUMER.DELETE.WFJ_prod.{d}"),
                format!("$KV.{rec}.run.manager.{run}.>"),
                format!("$KV.{rec}.program.manager.{run}"),
                format!("$KV.{rec}.notice.manager.{run}.>"),
                format!("$KV.{rec}.migration.manager.{run}.>"),
                "$JS.API.INFO".to_owned(),
            ]
        );
        assert_eq!(pr.permissions.subscribe.allow, rows(&[INBOX]));
    }

    #[test]
    fn run_mediator_exact_rows() {
        let b = run_binding();
        let c = run_driver_caller(&b.run, &b.owner).unwrap();
        let triple = format!("{OWNER}.{}.{}", c.actor, c.uid);
        let pr = run_mediator(&b).unwrap();
        let run = "run-0123456789abcdef0123456789abcdef";
        let d = format!("wfj_{run}_00ff00ff00ff00ff");
        let rec = "cotal_records_prod";
        assert_eq!(pr.name, "run-mediator");
        assert_eq!(pr.tags, tags(c.actor.as_str()));
        assert_eq!(pr.ttl_seconds, 3600);
        assert_eq!(
            pr.permissions.publish.allow,
            vec![
                format!("$JS.API.CONSUMER.CREATE.WFJ_prod.{d}.{P}.wfj.{run}"),
                format!("$JS.API.CONSUMER.INFO.WFJ_prod.{d}"),
                format!("$JS.API.CONSUMER.MSG.NEXT.WFJ_prod.{d}"),
                format!("$JS.ACK.WFJ_prod.{d}.>"),
                format!("$JS.API.CONSUMER.DELETE.WFJ_prod.{d}"),
                format!("$KV.{rec}.run.manager.{run}.>"),
                format!("$KV.{rec}.program.manager.{run}"),
                format!("$KV.{rec}.notice.manager.{run}.>"),
                format!("$KV.{rec}.migration.manager.{run}.>"),
                format!("$KV.{rec}.cp.manager.>"),
                format!("$JS.API.STREAM.MSG.GET.KV_{rec}"),
                "$JS.API.STREAM.MSG.GET.KV_cotal_admission_prod".to_owned(),
                format!("{P}.epf.manager.cp.>"),
                "$JS.API.STREAM.MSG.GET.EPF_prod".to_owned(),
                format!("{P}.ept.manager.{IID}.4.*.schedule"),
                "$JS.API.STREAM.MSG.GET.EPT_prod".to_owned(),
                "$JS.API.STREAM.INFO.CHAT_prod".to_owned(),
                "$JS.API.STREAM.MSG.GET.CHAT_prod".to_owned(),
                "$JS.API.CONSUMER.CREATE.CHAT_prod.>".to_owned(),
                "$JS.API.CONSUMER.INFO.CHAT_prod.>".to_owned(),
                "$JS.API.CONSUMER.MSG.NEXT.CHAT_prod.>".to_owned(),
                "$JS.API.CONSUMER.DELETE.CHAT_prod.>".to_owned(),
                "$JS.ACK.CHAT_prod.>".to_owned(),
                "$JS.API.STREAM.INFO.KV_cotal_presence_prod".to_owned(),
                "$JS.API.CONSUMER.CREATE.KV_cotal_presence_prod.>".to_owned(),
                "$JS.API.CONSUMER.INFO.KV_cotal_presence_prod.>".to_owned(),
                "$JS.API.CONSUMER.DELETE.KV_cotal_presence_prod.>".to_owned(),
                "$JS.FC.>".to_owned(),
                "$KV.cotal_channels_prod.>".to_owned(),
                "$JS.API.STREAM.MSG.GET.KV_cotal_channels_prod".to_owned(),
                "$KV.cotal_members_prod.>".to_owned(),
                "$JS.API.STREAM.MSG.GET.KV_cotal_members_prod".to_owned(),
                format!("{P}.ep.one.*.describe.{triple}.*"),
                format!("{P}.ep.one.manager.spawn.{triple}.*"),
                format!("{P}.ep.one.manager.turn.owner.{OWNER}.{triple}.*"),
                format!("{P}.ep.one.manager.despawn.owner.{OWNER}.{triple}.*"),
                format!("$JS.API.DIRECT.GET.EPC_prod.{P}.epc.>"),
                "$JS.API.INFO".to_owned(),
            ]
        );
        assert_eq!(
            pr.permissions.subscribe.allow,
            vec![format!("{P}.ep.reply.*.*.*.{triple}.*"), INBOX.to_owned()]
        );
    }

    fn operator(scope: RunOperatorScope) -> Profile {
        run_operator(&RunOperatorBinding {
            space: space(),
            principal: principal("cli"),
            conn: conn(),
            endpoint: EndpointName::parse("manager").unwrap(),
            takeover: TakeoverId::parse("tk1").unwrap(),
            scope,
        })
        .unwrap()
    }

    #[test]
    fn run_operator_exact_rows_per_scope() {
        let base = [
            "$JS.API.STREAM.MSG.GET.KV_cotal_records_prod",
            "$JS.API.STREAM.MSG.GET.KV_cotal_admission_prod",
        ];
        let list = operator(RunOperatorScope::List);
        assert_eq!(list.name, "run-operator");
        assert_eq!(list.tags, tags("cli"));
        assert_eq!(list.ttl_seconds, 60);
        assert_eq!(
            list.permissions.publish.allow,
            rows(&[base[0], base[1], "$JS.API.INFO"])
        );
        assert_eq!(list.permissions.subscribe.allow, rows(&[INBOX]));

        let status = operator(RunOperatorScope::Status(RunId::parse("run-1").unwrap()));
        assert_eq!(
            status.permissions.publish.allow,
            vec![
                base[0].to_owned(),
                base[1].to_owned(),
                format!("$JS.API.CONSUMER.CREATE.WFJ_prod.wfj_run-1_tk1.{P}.wfj.run-1"),
                "$JS.API.CONSUMER.INFO.WFJ_prod.wfj_run-1_tk1".to_owned(),
                "$JS.API.CONSUMER.MSG.NEXT.WFJ_prod.wfj_run-1_tk1".to_owned(),
                "$JS.ACK.WFJ_prod.wfj_run-1_tk1.>".to_owned(),
                "$JS.API.CONSUMER.DELETE.WFJ_prod.wfj_run-1_tk1".to_owned(),
                "$JS.API.INFO".to_owned(),
            ]
        );

        let answer = operator(RunOperatorScope::Answer(
            CheckpointToken::parse("req-42").unwrap(),
        ));
        assert_eq!(
            answer.permissions.publish.allow,
            vec![
                base[0].to_owned(),
                base[1].to_owned(),
                "$KV.cotal_records_prod.answer.manager.req-42.>".to_owned(),
                "$KV.cotal_records_prod.cp.manager.req-42.>".to_owned(),
                format!("{P}.epf.manager.cp.req-42"),
                "$JS.API.STREAM.MSG.GET.EPF_prod".to_owned(),
                "$JS.API.INFO".to_owned(),
            ]
        );
    }

    #[test]
    fn run_admitter_exact_rows() {
        let pr = run_admitter(&RunAdmitterBinding {
            space: space(),
            principal: principal("cli"),
            conn: conn(),
            endpoint: EndpointName::parse("manager").unwrap(),
            run: RunId::parse("run-abc").unwrap(),
        })
        .unwrap();
        assert_eq!(pr.name, "run-admitter");
        assert_eq!(pr.tags, tags("cli"));
        assert_eq!(pr.ttl_seconds, 60);
        assert_eq!(
            pr.permissions.publish.allow,
            rows(&[
                "$JS.API.INFO",
                "$KV.cotal_admission_prod.admission.v1.manager.run-abc",
                "$KV.cotal_admission_prod.revoked.v1.manager.run-abc",
                "$JS.API.STREAM.MSG.GET.KV_cotal_admission_prod",
            ])
        );
        assert_eq!(pr.permissions.subscribe.allow, rows(&[INBOX]));
    }

    #[test]
    fn retirement_requester_exact_rows() {
        let pr = retirement_requester(&RetirementRequesterBinding {
            space: space(),
            caller: caller("manager_serve_x", UID),
            conn: conn(),
            target: caller("agent7", TUID),
        })
        .unwrap();
        assert_eq!(pr.name, "retirement-requester");
        assert_eq!(pr.tags, tags("manager_serve_x"));
        assert_eq!(pr.ttl_seconds, 300);
        assert_eq!(
            pr.permissions.publish.allow,
            vec![format!(
                "{P}.ep.one.auth.retire-lifecycle.handle.{OWNER}.agent7.{TUID}.\
                 {OWNER}.manager_serve_x.{UID}.*"
            )]
        );
        assert_eq!(
            pr.permissions.subscribe.allow,
            vec![
                format!("{P}.ep.reply.*.*.*.{OWNER}.manager_serve_x.{UID}.*"),
                INBOX.to_owned()
            ]
        );
        // Reaches only the exact target: no `>`, no KV, no stream API.
        for row in pr.permissions.publish.allow.iter() {
            assert!(!row.contains('>') && !row.contains("$KV") && !row.contains("STREAM."));
        }
    }

    #[test]
    fn provisioner_exact_rows() {
        let pr = provisioner(&ProvisionerBinding {
            space: space(),
            principal: principal("provisioner"),
            conn: conn(),
        })
        .unwrap();
        assert_eq!(pr.name, "provisioner");
        assert_eq!(pr.tags, tags("provisioner"));
        assert_eq!(pr.ttl_seconds, 300);
        let inventory = [
            "CHAT_prod",
            "DM_prod",
            "TASK_prod",
            "INBOX_prod",
            "DLV_prod",
            "OBJ_cotal_artifacts_prod",
            "EPJ_prod",
            "EPF_prod",
            "EPE_prod",
            "EPT_REQ_prod",
            "EPR_prod",
            "EPT_prod",
            "EPW_prod",
            "WFJ_prod",
            "EPC_prod",
            "KV_cotal_sessions_prod",
            "KV_cotal_records_prod",
            "KV_cotal_presence_prod",
            "KV_cotal_channels_prod",
            "KV_cotal_members_prod",
            "KV_cotal_acl_prod",
            "KV_cotal_membership_prod",
            "KV_cotal_delivery_prod",
            "KV_cotal_manager_prod",
        ];
        let mut want = vec!["$JS.API.INFO".to_owned()];
        for x in inventory {
            want.push(format!("$JS.API.STREAM.CREATE.{x}"));
            want.push(format!("$JS.API.STREAM.INFO.{x}"));
        }
        for x in ["presence", "delivery", "manager"] {
            want.push(format!("$JS.API.STREAM.UPDATE.KV_cotal_{x}_prod"));
        }
        for x in ["DM_prod", "DLV_prod", "TASK_prod"] {
            want.push(format!("$JS.API.CONSUMER.CREATE.{x}.>"));
            want.push(format!("$JS.API.CONSUMER.DURABLE.CREATE.{x}.>"));
            want.push(format!("$JS.API.CONSUMER.INFO.{x}.>"));
        }
        want.extend(
            [
                "$KV.cotal_acl_prod.>",
                "$KV.cotal_channels_prod.>",
                "$JS.API.STREAM.MSG.GET.KV_cotal_acl_prod",
                "$JS.API.DIRECT.GET.KV_cotal_acl_prod.>",
                "$JS.API.STREAM.MSG.GET.KV_cotal_channels_prod",
                "$JS.API.DIRECT.GET.KV_cotal_channels_prod.>",
                "$JS.API.STREAM.UPDATE.KV_cotal_records_prod",
                "$JS.API.STREAM.UPDATE.KV_cotal_issued_prod",
                "$JS.API.STREAM.UPDATE.KV_cotal_accepted_prod",
                "$JS.API.STREAM.UPDATE.KV_cotal_admission_prod",
                "$JS.API.CONSUMER.CREATE.KV_cotal_records_prod.>",
                "$JS.API.CONSUMER.INFO.KV_cotal_records_prod.>",
                "$JS.API.CONSUMER.DELETE.KV_cotal_records_prod.>",
                "$JS.API.STREAM.MSG.GET.KV_cotal_records_prod",
                "$JS.API.DIRECT.GET.KV_cotal_records_prod.$KV.cotal_records_prod.mgrslot.>",
            ]
            .iter()
            .map(|s| (*s).to_owned()),
        );
        assert_eq!(pr.permissions.publish.allow, want);
        assert_eq!(pr.permissions.subscribe.allow, rows(&[INBOX]));
    }

    fn deprov(channels: &[&str]) -> Result<Profile, cotal_core::EpError> {
        deprovisioner(&DeprovisionerBinding {
            space: space(),
            principal: principal("manager_serve_x"),
            conn: conn(),
            target: principal("agent7"),
            target_uid: LifecycleUid::parse(TUID).unwrap(),
            member_channels: channels
                .iter()
                .map(|c| Channel::parse(c).unwrap())
                .collect(),
        })
    }

    #[test]
    fn deprovisioner_exact_rows() {
        let base = vec![
            "$JS.API.INFO".to_owned(),
            format!("$JS.API.CONSUMER.DELETE.DM_prod.dm_{OWNER}-agent7-{TUID}"),
            format!("$JS.API.CONSUMER.DELETE.DLV_prod.dlv_{OWNER}-agent7-{TUID}"),
            "$JS.API.STREAM.INFO.KV_cotal_acl_prod".to_owned(),
            format!("$KV.cotal_acl_prod.{OWNER}.agent7.{TUID}"),
        ];
        let pr = deprov(&[]).unwrap();
        assert_eq!(pr.name, "deprovisioner");
        assert_eq!(pr.tags, tags("manager_serve_x"));
        assert_eq!(pr.ttl_seconds, 300);
        assert_eq!(pr.permissions.publish.allow, base);
        assert_eq!(pr.permissions.subscribe.allow, rows(&[INBOX]));

        let pr = deprov(&["team.backend", "general", "general"]).unwrap();
        let mut want = base;
        want.push("$JS.API.STREAM.INFO.KV_cotal_members_prod".to_owned());
        want.push(format!(
            "$KV.cotal_members_prod.general/{OWNER}.agent7.{TUID}"
        ));
        want.push(format!(
            "$KV.cotal_members_prod.team.backend/{OWNER}.agent7.{TUID}"
        ));
        assert_eq!(pr.permissions.publish.allow, want);
    }

    #[test]
    fn registration_executor_exact_rows() {
        let build = |window| {
            registration_executor(&RegistrationExecutorBinding {
                space: space(),
                principal: principal("auth_reg"),
                conn: conn(),
                endpoint: endpoint(),
                instance: iid(),
                window,
            })
            .unwrap()
        };
        let pr = build(ExecutorWindow::Registration);
        let rec = "cotal_records_prod";
        assert_eq!(pr.name, "endpoint-serve-executor");
        assert_eq!(pr.tags, tags("auth_reg"));
        assert_eq!(pr.ttl_seconds, 300);
        assert_eq!(
            pr.permissions.publish.allow,
            vec![
                "$JS.API.INFO".to_owned(),
                format!("$KV.cotal_auth_prod.epgate.{E}.{IID}"),
                format!("$KV.cotal_auth_prod.eprepair.{E}.{IID}"),
                format!("$KV.cotal_auth_prod.epcred.{E}.{IID}.>"),
                format!("$KV.{rec}.svc.{E}.{IID}.spec"),
                format!("$KV.{rec}.svc.{E}.{IID}.status"),
                format!("$KV.{rec}.govern.{E}"),
                format!("{P}.epc.*"),
                format!("$JS.API.DIRECT.GET.EPC_prod.{P}.epc.>"),
                "$JS.API.DIRECT.GET.EPC_prod".to_owned(),
                "$JS.API.STREAM.MSG.GET.KV_cotal_auth_prod".to_owned(),
                format!("$JS.API.DIRECT.GET.KV_{rec}.$KV.{rec}.svc.{E}.{IID}.spec"),
                format!("$JS.API.DIRECT.GET.KV_{rec}.$KV.{rec}.svc.{E}.{IID}.status"),
                format!("$JS.API.DIRECT.GET.KV_{rec}.$KV.{rec}.govern.{E}"),
                format!("$JS.API.STREAM.MSG.GET.KV_{rec}"),
            ]
        );
        assert_eq!(pr.permissions.subscribe.allow, rows(&[INBOX]));
        let reconcile = build(ExecutorWindow::Reconcile);
        assert_eq!(reconcile.ttl_seconds, 60);
        assert_eq!(reconcile.permissions, pr.permissions);
    }

    // ---- refusals ---------------------------------------------------------------------------

    #[test]
    fn standing_ttl_bounds_name_the_bound() {
        assert_eq!(StandingTtl::default().seconds(), 86_400);
        assert_eq!(StandingTtl::new(5).unwrap().seconds(), 5);
        assert_eq!(StandingTtl::new(86_400).unwrap().seconds(), 86_400);
        let low = StandingTtl::new(4).unwrap_err();
        assert_eq!(low.code, ErrorCode::BadRequest);
        assert!(low.message.contains("at least 5 s"), "{}", low.message);
        let high = StandingTtl::new(86_401).unwrap_err();
        assert_eq!(high.code, ErrorCode::BadRequest);
        assert!(high.message.contains("at most 86400 s"), "{}", high.message);
    }

    #[test]
    fn binding_tokens_refuse_metacharacters() {
        for bad in [
            "short",
            "a.b.c.d.e.f.g",
            "UABC>DEFGH",
            "UABC*DEFGH",
            "UABC DEFGH",
        ] {
            let err = ConnId::parse(bad).unwrap_err();
            assert_eq!(err.code, ErrorCode::BadRequest, "{bad}");
        }
        assert!(ConnId::parse(&"A".repeat(120)).is_ok());
        assert!(ConnId::parse(&"A".repeat(121)).is_err());
        for bad in ["", "a.b", "a*", &"r".repeat(65)] {
            assert!(RunId::parse(bad).is_err(), "{bad}");
            assert!(TakeoverId::parse(bad).is_err(), "{bad}");
            assert!(CheckpointToken::parse(bad).is_err(), "{bad}");
        }
        for bad in ["", "Hot", "a_b", "a.b", &"p".repeat(33)] {
            assert!(PoolToken::parse(bad).is_err(), "{bad}");
        }
        for bad in ["", "team.>", "team.*", "*", ">", "a..b", ".a", "a b"] {
            let err = Channel::parse(bad).unwrap_err();
            assert_eq!(err.code, ErrorCode::BadRequest, "{bad}");
        }
    }

    #[test]
    fn a_subject_over_1024_bytes_is_refused_not_minted() {
        let long = vec!["c"; 600].join(".");
        let err = deprov(&[long.as_str()]).unwrap_err();
        assert_eq!(err.code, ErrorCode::BadRequest);
        assert!(err.message.contains("1024-byte"), "{}", err.message);
    }

    // ---- through the JWT codec ------------------------------------------------------------------

    /// Every profile survives minting: the decoded user JWT carries exactly the built allow and
    /// deny lists (in order), the tags, the profile name and `exp = iat + ttl`, so the exact-row
    /// tests above are assertions about minted credentials.
    #[test]
    fn every_minted_profile_jwt_decodes_to_its_exact_rows_and_tags() {
        use cotal_core::jwt::{self, ClaimType, UnixSeconds, UserNats, Validity};
        use nkeys::{KeyPair, KeyPairType};
        let account = KeyPair::new_from_raw(KeyPairType::Account, [3; 32]).unwrap();
        let user = KeyPair::new_from_raw(KeyPairType::User, [4; 32]).unwrap();
        let now = UnixSeconds(1_700_000_000);
        for pr in every_profile() {
            let nats = UserNats {
                permissions: pr.permissions.clone(),
                tags: pr.tags.clone(),
                ..UserNats::default()
            };
            let validity = Validity {
                issued_at: now,
                expires_at: Some(UnixSeconds(now.0 + pr.ttl_seconds)),
            };
            let token = jwt::user_jwt(
                &account,
                &account.public_key(),
                &user.public_key(),
                pr.name,
                &nats,
                validity,
            )
            .unwrap();
            let claims = jwt::verify(&token, ClaimType::User, &account.public_key(), now).unwrap();
            assert_eq!(claims.name, pr.name);
            assert_eq!(claims.exp, validity.expires_at, "{}", pr.name);
            let decoded = claims.user().unwrap();
            assert_eq!(decoded.permissions, pr.permissions, "{}", pr.name);
            assert_eq!(decoded.tags, pr.tags, "{}", pr.name);
        }
    }

    // ---- properties across every profile ----------------------------------------------------

    #[test]
    fn every_profile_is_tagged_and_bounded() {
        for pr in every_profile() {
            assert_eq!(pr.tags.len(), 3, "{}", pr.name);
            let principal = pr.tags[2].strip_prefix("principal:").unwrap();
            let (o, a) = principal.split_once('.').unwrap();
            assert_eq!(pr.tags[0], format!("owner:{o}"));
            assert_eq!(pr.tags[1], format!("actor:{a}"));
            assert!((1..=86_400).contains(&pr.ttl_seconds), "{}", pr.name);
            assert!(pr.permissions.response.is_none());
            for list in [
                &pr.permissions.publish.allow,
                &pr.permissions.subscribe.allow,
            ] {
                let unique: std::collections::BTreeSet<&String> = list.iter().collect();
                assert_eq!(unique.len(), list.len(), "{}: a repeated row", pr.name);
                for row in list {
                    let subject = row.split(' ').next().unwrap();
                    assert!(subject.len() <= MAX_SUBJECT_BYTES, "{}: {row}", pr.name);
                }
            }
            // Only the serve credential carries queue-qualified rows, only on subscribe.
            for row in &pr.permissions.publish.allow {
                assert!(!row.contains(' '), "{}: {row}", pr.name);
            }
        }
    }

    /// No row anywhere is a bare `>`, a top-level wildcard, or a request-rail row whose wildcard
    /// sits in (or before) the command position: a credential never spans commands.
    #[test]
    fn no_profile_holds_a_cross_command_wildcard() {
        for pr in every_profile() {
            let all = pr
                .permissions
                .publish
                .allow
                .iter()
                .chain(&pr.permissions.subscribe.allow);
            for row in all {
                let first = row.split('.').next().unwrap();
                assert!(first != ">" && first != "*", "{}: {row}", pr.name);
                assert!(!row.starts_with("cotal.*") && !row.starts_with("cotal.>"));
                let Some(t) = app_tokens(row) else { continue };
                let rail_cmd = match t.as_slice() {
                    ["ep", "v1", "one" | "all", _, c, ..] => Some(*c),
                    ["ep", "v1", "inst", _, i, c, ..] | ["ep", "inst", _, i, c, ..] => {
                        assert!(*i != "*" && *i != ">", "{}: {row}", pr.name);
                        Some(*c)
                    }
                    ["ep", "one" | "all", _, c, ..] => Some(*c),
                    _ => None,
                };
                if let Some(c) = rail_cmd {
                    assert!(c != "*" && c != ">", "{}: {row}", pr.name);
                }
            }
        }
    }

    /// F98: only the named exceptions touch `cotal_auth_<space>` — the goal-writer's own-gate
    /// read, the registration executor (the plane's own trusted connection) and the remote
    /// manager's five-minute executor, whose registration surface a reference manager runs its
    /// own ceremony over. The executor's is the only consumer verb on the auth bucket, and its
    /// create is the filter-subject form pinned to its own instance's family.
    #[test]
    fn f98_auth_bucket_grants_are_the_named_exceptions_only() {
        for pr in every_profile() {
            let auth: Vec<&String> = pr
                .permissions
                .publish
                .allow
                .iter()
                .filter(|r| r.contains("cotal_auth_prod"))
                .collect();
            let executor = pr.tags.iter().any(|t| t.contains("manager_exec_"));
            for row in &auth {
                if row.contains("CONSUMER.CREATE") {
                    assert!(executor, "{}: {row}", pr.name);
                    assert!(
                        row.ends_with(&format!(".*.$KV.cotal_auth_prod.epcred.manager.{IID}.>")),
                        "{row}"
                    );
                } else if row.contains("CONSUMER") {
                    assert!(executor, "{}: {row}", pr.name);
                }
            }
            match pr.name {
                "goal-writer" => assert_eq!(
                    auth,
                    vec!["$JS.API.STREAM.MSG.GET.KV_cotal_auth_prod"],
                    "goal-writer"
                ),
                "endpoint-serve-executor" => assert_eq!(auth.len(), 4),
                "remote-manager" if executor => assert_eq!(auth.len(), 7, "{auth:?}"),
                other => assert!(auth.is_empty(), "{other}: {auth:?}"),
            }
        }
    }

    /// F4: every deprovisioner row that names the target names its lifecycle uid, so the same
    /// credential is broker-denied against a same-alias successor.
    #[test]
    fn f4_deprovisioner_never_reaches_a_same_alias_successor() {
        let pr = deprov(&["general"]).unwrap();
        let successor = "ssssssssssssssssssssssssss";
        let successor_rows = [
            format!("$JS.API.CONSUMER.DELETE.DM_prod.dm_{OWNER}-agent7-{successor}"),
            format!("$JS.API.CONSUMER.DELETE.DLV_prod.dlv_{OWNER}-agent7-{successor}"),
            format!("$KV.cotal_acl_prod.{OWNER}.agent7.{successor}"),
            format!("$KV.cotal_members_prod.general/{OWNER}.agent7.{successor}"),
        ];
        for s in &successor_rows {
            for row in &pr.permissions.publish.allow {
                assert!(!matches(row, s), "{row} reaches {s}");
            }
        }
    }

    /// F87/F88: the driver's journal rows name one run and one takeover, and it holds nothing on
    /// the admission store; mediator and operator read the admission, neither writes it.
    #[test]
    fn f87_f88_run_rows_are_per_run_and_admission_is_read_only() {
        let b = run_binding();
        let driver = run_driver(&b).unwrap();
        let other_run = format!("{P}.wfj.run-other");
        for row in &driver.permissions.publish.allow {
            assert!(!matches(row, &other_run), "{row}");
            assert!(!row.contains("admission"), "{row}");
            assert!(!row.contains(".wfj.>"), "{row}");
        }
        for pr in [run_mediator(&b).unwrap(), operator(RunOperatorScope::List)] {
            let adm: Vec<&String> = pr
                .permissions
                .publish
                .allow
                .iter()
                .filter(|r| r.contains("admission"))
                .collect();
            assert_eq!(
                adm,
                vec!["$JS.API.STREAM.MSG.GET.KV_cotal_admission_prod"],
                "{}",
                pr.name
            );
        }
    }

    // ---- serve properties (F39, F40, F70) ---------------------------------------------------

    fn command_set() -> impl Strategy<Value = Vec<String>> {
        proptest::collection::vec("[a-z0-9][a-z0-9-]{0,11}", 0..12).prop_map(|v| {
            v.into_iter()
                .filter(|c| c != "describe")
                .collect::<Vec<_>>()
        })
    }

    /// The epoch position of an epoch-bearing plane, if the tokens are on one (F39's five).
    fn epoch_position(t: &[&str]) -> Option<usize> {
        match t {
            ["ep", "reply", ..] => Some(4),
            ["ep", "v1", "reply", ..] => Some(5),
            ["epe" | "ept" | "epr" | "eps", ..] => Some(3),
            _ => None,
        }
    }

    proptest! {
        /// F39: every publish row on an application plane is one of the epoch planes, pins the
        /// bound epoch literally at the epoch position with no wildcard before it, and no row
        /// matches an egress subject carrying any other epoch.
        #[test]
        fn f39_serve_egress_pins_only_the_bound_epoch(
            epoch in any::<u64>(),
            other in any::<u64>(),
            commands in command_set(),
            journal in any::<bool>(),
        ) {
            let cmds: Vec<&str> = commands.iter().map(String::as_str).collect();
            let pr = endpoint_serve(&serve_binding(epoch, &cmds, journal, &["p1"])).unwrap();
            let bound = epoch.to_string();
            for row in &pr.permissions.publish.allow {
                let Some(t) = app_tokens(row) else { continue };
                let pos = epoch_position(&t);
                prop_assert!(pos.is_some(), "{row} publishes off the epoch planes");
                let pos = pos.unwrap();
                prop_assert_eq!(t[pos], bound.as_str(), "{}", row);
                prop_assert!(!t[..pos].contains(&">") && !t[..pos].contains(&"*"), "{}", row);
            }
            for row in &pr.permissions.subscribe.allow {
                if let Some(t) = app_tokens(row) {
                    if t[0] == "ept" {
                        prop_assert_eq!(t[3], bound.as_str(), "{}", row);
                    }
                }
            }
            if other != epoch {
                let stale = [
                    format!("{P}.ep.reply.{E}.{IID}.{other}.o.a.u.n"),
                    format!("{P}.ep.v1.reply.{E}.{IID}.{other}.o.a.u.g.n"),
                    format!("{P}.epe.{E}.{IID}.{other}.topic"),
                    format!("{P}.ept.{E}.{IID}.{other}.t1.schedule"),
                    format!("{P}.epr.{E}.{IID}.{other}.svc.q"),
                    format!("{P}.eps.{E}.sess.{other}.out"),
                ];
                for s in &stale {
                    for row in &pr.permissions.publish.allow {
                        prop_assert!(!matches(row, s), "{} matches stale {}", row, s);
                    }
                }
            }
        }

        /// F70: every class-rail subscribe row is queue-qualified with the endpoint token, no
        /// other row is; there is exactly one row per (registered command ∪ describe) × rail
        /// shape; every rail row names a registered command. F40: the request-rail subscribe
        /// rows are the same at every epoch (ingress is fenced by revocation, not subject).
        #[test]
        fn f70_serve_subscribe_rows_are_queue_qualified_per_command(
            epoch in 0u64..1000,
            commands in command_set(),
        ) {
            let cmds: Vec<&str> = commands.iter().map(String::as_str).collect();
            let pr = endpoint_serve(&serve_binding(epoch, &cmds, false, &[])).unwrap();
            let mut registered: Vec<&str> = cmds.clone();
            registered.sort_unstable();
            registered.dedup();
            registered.push("describe");
            let sub = &pr.permissions.subscribe.allow;
            prop_assert_eq!(sub.len(), registered.len() * 6 + 2);
            for row in sub {
                let queue = row.split_once(' ').map(|(_, q)| q);
                let Some(t) = app_tokens(row) else {
                    prop_assert_eq!(row.as_str(), INBOX);
                    continue;
                };
                let (class, c) = match t.as_slice() {
                    ["ep", "one", e, c, ">"] | ["ep", "v1", "one", e, c, ">"] => {
                        prop_assert_eq!(*e, E);
                        (true, *c)
                    }
                    ["ep", "all", e, c, ">"] | ["ep", "v1", "all", e, c, ">"] => {
                        prop_assert_eq!(*e, E);
                        (false, *c)
                    }
                    ["ep", "inst", e, i, c, ">"] | ["ep", "v1", "inst", e, i, c, ">"] => {
                        prop_assert_eq!((*e, *i), (E, IID));
                        (false, *c)
                    }
                    ["ept", ..] => continue,
                    _ => { prop_assert!(false, "unexpected serve subscribe row {}", row); continue }
                };
                prop_assert!(registered.contains(&c), "{} serves unregistered {}", row, c);
                if class {
                    prop_assert_eq!(queue, Some(E), "{}", row);
                } else {
                    prop_assert_eq!(queue, None, "{}", row);
                }
            }
            // F40: the request-rail rows do not depend on the epoch at all.
            let next = endpoint_serve(&serve_binding(epoch + 1, &cmds, false, &[])).unwrap();
            let rails = |p: &Profile| -> Vec<String> {
                p.permissions.subscribe.allow.iter()
                    .filter(|r| r.contains(".ep.")).cloned().collect()
            };
            prop_assert_eq!(rails(&pr), rails(&next));
        }

        /// Standing lifetimes: accepted exactly on 5..=86 400 s.
        #[test]
        fn standing_ttl_is_bounded(secs in any::<u64>()) {
            prop_assert_eq!(
                StandingTtl::new(secs).is_ok(),
                (STANDING_TTL_MIN_SECS..=STANDING_TTL_MAX_SECS).contains(&secs)
            );
        }
    }
}

/// A trusted host's standing lifetime: the default when none is given, the bounds otherwise.
#[test]
fn a_given_standing_lifetime_is_bounded_and_defaults_to_a_day() {
    use cotal_core::profiles::StandingTtl;
    assert_eq!(StandingTtl::given(None).unwrap(), StandingTtl::DEFAULT);
    assert_eq!(StandingTtl::given(Some(600)).unwrap().seconds(), 600);
    assert_eq!(
        StandingTtl::given(Some(1)).unwrap_err().message,
        StandingTtl::new(1).unwrap_err().message
    );
}
