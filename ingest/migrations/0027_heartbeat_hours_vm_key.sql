-- Each VM-hour of heartbeat_hours with a number for its VM (issue 32). The gaps query (audit gaps and the fleet
-- dashboard's gaps panel) asks whether each annotated VM's collector reported in the annotation's hour or the one
-- before. Annotations name about half of the benchmark's fleet a day, so it reads every VM-hour of the window, and
-- it compared each row's vm_id, lowered, with the annotated ids: about 60 ms at a year of 20,000 VMs, 2.5 M rows
-- and most of the panel's 506 ms p95 at 100,000. Comparing a stored number costs a third of that (20 against 60 ms
-- on the same rows). The pipeline dashboard's heartbeat panels group VM-hours by it too: grouping by the id hashed
-- a 36-character string per VM-hour (Heartbeat coverage 93 -> 55 ms of CPU, Outbox depth 63 -> 41 at 20,000 VMs).
--
-- heartbeat_hours.vm_key   cityHash64(lower(vm_id)), written with each row; rows stored before compute it as they are
--                          read, until a merge writes it (no mutation: nothing runs in the background at start).
--                          Two VMs sharing a key would need a 64-bit hash collision: about 1 in 10^9 for a fleet of
--                          100,000 VMs.
ALTER TABLE ${db}.heartbeat_hours${local} ${on_cluster}
    ADD COLUMN IF NOT EXISTS vm_key UInt64 MATERIALIZED cityHash64(lower(vm_id)) AFTER vm_id;
ALTER TABLE ${db}.heartbeat_hours ${on_cluster}
    ADD COLUMN IF NOT EXISTS vm_key UInt64 MATERIALIZED cityHash64(lower(vm_id)) AFTER vm_id;
