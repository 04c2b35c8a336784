"""RQ's steps around one commit job, without the writes a commit job does not need.

``bench/commit_scaleout.py --trace`` shows RQ writing, around each job: the job's heartbeat
twice as it starts (``Job.heartbeat``, then ``Job.prepare_for_execution`` writing it again
with the status) and once more as it ends (then the job's whole hash is written over it);
and, as it finishes, a WATCH and SMEMBERS of the job's dependents and lifetimes for the
job's dependents and dependencies keys. No job depends on a commit's (ovstream never passes
``depends_on``; a commit's next step is a job or a due read of its own), so those keys never
exist. Here the heartbeats written over at once and the dependents' steps are left out: six
commands a commit; and the job's execution record, which RQ writes in a MULTI/EXEC of its
own just before the job's start, is written with it (one round trip, not two). And a done
job's result (a stream of its own, XADD + EXPIRE, holding the "running" a commit job returns)
is not written, nor its status alone before its hash is written with it: ovstream reads a job's
result only when the job failed (``job_error``), and that is written as RQ writes it. What RQ's
maintenance, ``rq info`` and ovstream's ``job_state`` read (the job's hash and status, the
registries, the execution record) is written as RQ writes it. A job that repeats (``Repeat``,
not used by ovstream) takes RQ's own way.

And a job that meets Redis away (a failover's moment, as it runs or as its end is written) is
said in one line, not as RQ's error with a traceback: Redis is what failed, not the job, and
the worker's outage handling says what follows (workers.commits.worker).
"""

from __future__ import annotations

from typing import Any

from rq.executions import Execution
from rq.job import Job, JobStatus
from rq.utils import now
from rq.worker import WorkerStatus

from workers.store.outages import redis_went_away


class LeanJobSteps:
    """Mixed into an RQ worker class, ahead of it (``class W(LeanJobSteps, SimpleWorker)``)."""

    log_result_lifespan = False
    """RQ's "job ... result is kept for N seconds" line after each job: a done job's result is
    not kept here (``handle_job_success``), so the line would not be true."""

    execution: Execution | None  # BaseWorker's own
    _starting: Any = None
    """The pipeline of a job's start: its execution record queued on it (``prepare_execution``)."""

    def prepare_execution(self, job: Job) -> Execution:
        """RQ's execution record, queued on the pipeline the job's start sends
        (``prepare_job_execution``): RQ sends it in a MULTI/EXEC of its own just before."""
        self._starting = self.connection.pipeline()  # type: ignore[attr-defined]
        self.set_state(WorkerStatus.BUSY, pipeline=self._starting)  # type: ignore[attr-defined]
        ttl = self.get_heartbeat_ttl(job)  # type: ignore[attr-defined]
        execution = Execution.create(job, ttl, pipeline=self._starting, worker_name=self.name)  # type: ignore[attr-defined]
        self.execution = execution
        return execution

    def prepare_job_execution(self, job: Job, remove_from_intermediate_queue: bool = False) -> None:
        """RQ's, with the job's execution record (``prepare_execution``), without the job's
        first heartbeat (``prepare_for_execution`` writes it with the status) and without the
        LREM of the job from RQ's intermediate list: a commit worker's dequeue pops the job
        (BLPOP over its lines, workers.commits.lines)."""
        pipe, self._starting = self._starting or self.connection.pipeline(), None  # type: ignore[attr-defined]
        with pipe:
            self.set_current_job_id(job.id, pipeline=pipe)  # type: ignore[attr-defined]
            self.heartbeat(self.get_heartbeat_ttl(job), pipeline=pipe)  # type: ignore[attr-defined]
            job.prepare_for_execution(self.name, pipeline=pipe)  # type: ignore[attr-defined]
            # RQ also calls set_current_job_working_time(0): not kept (workers.commits.rq_record)
            pipe.execute()

    def handle_execution_ended(self, job: Job, queue: Any, heartbeat_ttl: int) -> None:
        """The end time only: the job's hash is written whole right after (success or failure)."""
        job.ended_at = now()

    def handle_job_success(self, job: Job, queue: Any, started_job_registry: Any) -> None:
        if job.repeats_left:
            super().handle_job_success(job, queue, started_job_registry)  # type: ignore[misc]
            return
        result_ttl = job.get_result_ttl(self.default_result_ttl)  # type: ignore[attr-defined]
        with self.connection.pipeline() as pipe:  # type: ignore[attr-defined]
            # one MULTI/EXEC, no WATCH: no job depends on a commit's (the module's docstring)
            if result_ttl != 0:  # its hash with its status, the finished registry
                job._status = JobStatus.FINISHED  # written with the hash (RQ writes it first alone)
                job.save(pipeline=pipe, include_meta=False, include_result=False)
                job.finished_job_registry.add(job, result_ttl, pipe)
            if result_ttl is not None and result_ttl > 0:
                pipe.expire(job.key, result_ttl)
            elif result_ttl == 0:
                job.delete(pipeline=pipe, remove_from_queue=False)
            self.cleanup_execution(job, pipeline=pipe)  # type: ignore[attr-defined]
            pipe.execute()
        assert job.started_at is not None and job.ended_at is not None
        taken = job.ended_at - job.started_at
        self.log.info("Successfully completed job %s in %ss on worker %s", job.id, taken, self.name)  # type: ignore[attr-defined]

    def handle_exception(self, job: Job, *exc_info: Any) -> None:
        error = exc_info[1] if len(exc_info) > 1 else None
        if isinstance(error, BaseException) and redis_went_away(error):
            self.log.warning(  # type: ignore[attr-defined]
                "Worker %s: job %s met Redis away (%s: %s) as it ran or as its end was written",
                self.name,  # type: ignore[attr-defined]
                job.id,
                type(error).__name__,
                error,
            )
            return  # RQ's exception handlers too are left out: make_worker installs none
        super().handle_exception(job, *exc_info)  # type: ignore[misc]
