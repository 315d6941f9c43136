-- A sharper bloom filter on transitions.event_id (issue 29). Every batch the ingest stores first asks which of its
-- keys are stored already (the conflict check); the read is narrowed by the batch's events, whose filter is what
-- prunes it. At the default false-positive rate (0.025) over four granules, a batch of 25 new events let 17 of 39
-- granules through (each granule holds hundreds of events, and every one of them is a chance to match); at 0.001
-- over one granule nearly none pass. It costs about four times the filter's bytes, still a small share of the table.
--
-- transitions.event_id_idx   bloom_filter(0.001) GRANULARITY 1 (was bloom_filter GRANULARITY 4); rebuilt for the
--                            parts already stored (a background mutation; reads are right before it ends)
ALTER TABLE ${db}.transitions${local} ${on_cluster} DROP INDEX IF EXISTS event_id_idx;
ALTER TABLE ${db}.transitions${local} ${on_cluster}
    ADD INDEX IF NOT EXISTS event_id_idx event_id TYPE bloom_filter(0.001) GRANULARITY 1;
ALTER TABLE ${db}.transitions${local} ${on_cluster} MATERIALIZE INDEX event_id_idx;
