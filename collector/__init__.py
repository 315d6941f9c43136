"""The sevents collector: poll IMDS Scheduled Events, diff, commit to a durable outbox, ship.

Read in order: settings · imds_policy (retry and api-version negotiation, pure) · imds (HTTP edge) · instance
(VM identity) · dhcp (non-VNET endpoint) · decode · transitions (pure diff) · enrich (wire records) · outbox
(SQLite) · statedir (lock, resumed snapshot) · agent (the poll step) · downtime_ledger · ship (sink) · process
(threads, loop, drain) · wiring (builds every part) · cli.

The collector's errors. A daemon rides out what it meets rather than exit, so none but the first three ever
ends a process; none is a ``sevents.errors.SeventsError``. The exit codes are ``sevents.errors.ExitCode``.

    ends the command
    ├── AgentError (agent)            the collector cannot start: state dir in use or unusable, --metrics-addr
    │                                 not bound (exit 3, NO_STATE)
    ├── OutboxError (outbox)          the outbox cannot be opened: exit 3 for once; run waits it out
    └── StatusError (status)          status: no outbox there, or it cannot be read (exit 3)
    a poll that failed: counted by kind, logged, the snapshot unchanged, the next poll tries again
    ├── ImdsError (imds)              IMDS did not answer well within the retry deadline (once: exit 1)
    │   └── ImdsInterrupted           shutdown while waiting (once: exit 130)
    ├── FetchError (fetch)            one request's timeout, cap or broken connection; imds retries it
    │   └── FetchInterrupted
    ├── DecodeError (decode)          the body is not a Scheduled Events document (once: exit 1)
    └── OutboxFull, OutboxIOError     the commit was refused: transitions held in memory, stored later
    kept inside their part
    ├── SinkError (sink)              the destination did not accept rows: retried with backoff, rows kept
    ├── AttestationError (attestation)  IMDS gave no attested document: nothing is shipped before the first
    ├── IdentityUnavailable (instance)  instance metadata unreadable: retried, records keep the last identity
    └── StateDirInUse (statedir)      raised as AgentError
"""
