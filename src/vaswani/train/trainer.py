"""The training loop: progress, validation, early stopping, checkpoints, exact resume, DDP.

The trainer alone writes the run's config (tasks return what they learn: `Task.run_config`) and alone
enters autocast in training: around each step's forward and loss, and around the task's validation."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from rich.console import Console

from vaswani import atomic
from vaswani.config import Config, ConfigError, ModelConfig
from vaswani.console import format_duration, progress_bar, stderr_console
from vaswani.data import store
from vaswani.model_dir import (
    WEIGHTS,
    CheckpointError,
    load_into,
    load_weights,
    save_weights,
    tied_names,
    untied_missing,
    weights_of,
    write_model_directory,
)
from vaswani.nn.attention import attention_kernels
from vaswani.runtime.device import autocast, compiling, pick_device
from vaswani.runtime.flops import peak_flops
from vaswani.runtime.precision import choose
from vaswani.train import checkpoint as ckpt
from vaswani.train.distributed import barrier, from_rank0, gathered, rank0_clock, summed
from vaswani.train.meter import Throughput
from vaswani.train.plot import plot_metrics
from vaswani.train.schedule import learning_rate, progress
from vaswani.train.tasks import make_task
from vaswani.train.tasks.base import HiddenStates, RunContext


@dataclass
class TrainState:
    """Everything besides weights and optimizer that a resumed run needs to continue exactly."""

    step: int = 0
    epoch: int = 0
    position: int = 0  # next batch of the epoch's order
    best_score: float | None = None
    best_step: int = 0  # the validation whose weights the model directory holds (model.safetensors)
    bad_validations: int = 0
    elapsed: float = 0.0  # seconds of training so far, validation included, summed over resumed runs
    history: list[dict[str, Any]] = field(default_factory=list)


class Trainer:
    """Trains `config`'s task (translation, lm, mlm or classify: train/tasks/) into `model_dir`, resuming the
    run found there. `init_from`: a model directory whose weights a fresh run starts from (fine-tuning; the
    classifier, which it lacks, starts fresh). `origin`: what the model came from, kept in vaswani.json."""

    def __init__(
        self,
        config: Config,
        model_dir: str | Path,
        console: Console | None = None,
        init_from: str | Path | None = None,
        origin: dict | None = None,
    ) -> None:
        self.model_dir = Path(model_dir)
        self.init_from = Path(init_from) if init_from else None
        self.origin = origin
        self._flops_model: ModelConfig | None = None  # the model the FLOP count sees, where not config.model
        self.rank = dist.get_rank() if dist.is_initialized() else 0
        self.world = dist.get_world_size() if dist.is_initialized() else 1
        self.console = console or stderr_console()
        self.device = pick_device(config.train.device)
        if self.device.type == "cuda" and self.world > 1:
            self.device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        self.context = RunContext(config, self.model_dir, self.rank, self.world, self.device, self.console)
        self.task = make_task(self.context)

    @property
    def config(self) -> Config:
        """The run's config, as far as it is known: completed from the data, then with the precision resolved."""
        return self.context.config

    def _set_config(self, config: Config) -> None:
        """The one place the run's config changes; the task sees the new one in the context it is handed."""
        self.context = dataclasses.replace(self.context, config=config)
        self.task.context = self.context

    def log(self, message: str) -> None:
        self.context.log(message)

    # -- set-up -------------------------------------------------------------------------------
    def _prepare_directory(self) -> Config | None:
        """Create the model directory, or find the run to resume in it; returns its saved config."""
        try:
            self.model_dir.mkdir(parents=True, exist_ok=True)
            probe = self.model_dir / ".write-test"
            probe.write_text("")
            probe.unlink()
        except OSError as error:
            raise ConfigError(f"cannot write to model directory {self.model_dir} ({error.strerror})") from None
        saved = self.model_dir / "config.yaml"
        return Config.load(saved) if saved.is_file() and ckpt.checkpoint_dirs(self.model_dir) else None

    def _check_resumable(self, saved: Config) -> None:
        if dataclasses.replace(saved.data, prepared="") != dataclasses.replace(self.config.data, prepared=""):
            raise ConfigError(
                f"{self.model_dir} holds a run with a different 'data' section; use a new model "
                "directory, or the same config to resume"
            )
        ours = dataclasses.replace(
            self.config.model, src_vocab_size=saved.model.src_vocab_size, tgt_vocab_size=saved.model.tgt_vocab_size
        )
        if ours != saved.model:
            raise ConfigError(f"{self.model_dir} holds a run with a different model; use a new model directory")

    def _build(self, data) -> None:
        run = self.task.run_config(data)
        if self.init_from is not None:  # the pretrained embeddings' rows, those past its tokenizer too (NLLB-200's)
            m, pretrained = run.model, self.config.model
            model = dataclasses.replace(
                m,
                src_vocab_size=max(m.src_vocab_size, pretrained.src_vocab_size),
                tgt_vocab_size=max(m.tgt_vocab_size, pretrained.tgt_vocab_size),
            )
            run = dataclasses.replace(run, model=model)
        self._set_config(run)
        c = self.config
        torch.manual_seed(c.train.seed)
        self.model = self.task.build_model(c.model).to(self.device)
        fused = self.device.type in ("cpu", "cuda")
        betas = (c.train.adam_beta1, c.train.adam_beta2)
        if c.train.weight_decay:  # AdamW's decoupled decay, on matrices only (GPT-2, nanoGPT), not biases and norms
            params = [p for p in self.model.parameters() if p.requires_grad]
            groups = [
                {"params": [p for p in params if p.dim() >= 2], "weight_decay": c.train.weight_decay},
                {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
            ]
            self.optimizer = torch.optim.AdamW(groups, lr=0.0, betas=betas, eps=c.train.adam_eps, fused=fused)
        else:  # the paper's Adam
            self.optimizer = torch.optim.Adam(
                self.model.parameters(), lr=0.0, betas=betas, eps=c.train.adam_eps, fused=fused
            )
        self.wrapped: torch.nn.Module = HiddenStates(self.model)
        if self.world > 1:
            ids = [self.device.index] if self.device.type == "cuda" else None
            self.wrapped = torch.nn.parallel.DistributedDataParallel(self.wrapped, device_ids=ids)
        if c.train.compile:  # the step runs the compiled module; validation and checkpoints use self.model
            self.wrapped = torch.compile(self.wrapped, dynamic=True)
        torch.manual_seed(c.train.seed + 1 + self.rank)  # dropout differs per rank; restored on resume

    # -- state --------------------------------------------------------------------------------
    def _rng_state(self) -> dict[str, Any]:
        state = {"torch": torch.get_rng_state(), "python": random.getstate()}
        if torch.cuda.is_available():
            state["cuda"] = torch.cuda.get_rng_state_all()
        return state

    def _set_rng_state(self, state: dict[str, Any]) -> None:
        torch.set_rng_state(state["torch"])
        random.setstate(state["python"])
        if "cuda" in state and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda"])

    def _save(self, state: TrainState, score: float) -> None:
        all_rng = gathered(self._rng_state(), self.world)
        if self.rank != 0:
            return
        full = {"train_state": dataclasses.asdict(state), "optimizer": self.optimizer.state_dict(), "rng": all_rng}
        weights = weights_of(self.model)
        # the best so far becomes the model to translate, before its checkpoint: a kill between the two leaves
        # weights that a resumed run, going over the same steps again, writes again (not a best it never saves)
        if state.best_score == score:
            save_weights(weights, self.model_dir / WEIGHTS)
        ckpt.save_checkpoint(self.model_dir, state.step, weights, full, score)
        ckpt.prune_checkpoints(self.model_dir, self.config.train.keep_last, self.config.train.keep_best)

    def _start_from(self, directory: Path) -> None:
        """The pretrained weights of `directory`; the classifier starts fresh (a fine-tuned model's is left out)."""
        weights = {k: v for k, v in load_weights(directory / WEIGHTS).items() if not k.startswith("classifier.")}
        missing, unexpected = self.model.load_state_dict(weights, strict=False)
        missing = [n for n in untied_missing(missing, tied_names(self.model)) if not n.startswith("classifier.")]
        if missing or unexpected:
            raise CheckpointError(
                f"{directory / WEIGHTS} does not fit this model (missing {missing[:3]}, unexpected {unexpected[:3]})"
            )
        self.log(f"starting from the weights of {directory}")

    def _resume(self) -> TrainState:
        checkpoints = ckpt.checkpoint_dirs(self.model_dir)
        if not checkpoints:
            if self.init_from is not None:
                self._start_from(self.init_from)
            return TrainState()
        latest = checkpoints[-1]
        full = ckpt.load_state(latest)
        load_into(self.model, load_weights(latest / WEIGHTS), latest / WEIGHTS)
        self.optimizer.load_state_dict(full["optimizer"])
        rng = full["rng"]
        self._set_rng_state(rng[self.rank] if self.rank < len(rng) else rng[0])
        state = TrainState(**full["train_state"])
        self.log(f"resuming {self.model_dir} from step {state.step} (epoch {state.epoch + 1})")
        return state

    def _output_words(self, data, fresh: bool) -> None:
        """model.output_words target: a new run's output layer produces the words its training targets use; a
        fine-tuned model's, those and the ones it produced before; a resumed run's, those it saved. The FLOP
        count then projects onto those words only."""
        words = getattr(self.model, "output_words", None)
        if words is None:
            return
        if fresh:
            seen = torch.from_numpy(self.task.target_words(data)).to(words.device)
            with torch.no_grad():
                words.copy_(seen | words if self.init_from is not None else seen)
        n = int(words.sum())
        # as the FLOP count sees it (runtime/flops.py): a projection onto n words; it reads nothing of the sharing
        self._flops_model = dataclasses.replace(self.config.model, tgt_vocab_size=n, share_embeddings=False)
        self.log(f"output words: {n:,} of the {len(words):,} target pieces, those the training targets use")

    # -- the loop ------------------------------------------------------------------------------
    def _next_batches(self, stream, state: TrainState) -> list:
        """This rank's `accumulate` batches of the next optimizer step, from the loader's stream;
        the state records where the stream stands, so a resumed run goes on from the same batch."""
        out = []
        for _ in range(self.config.train.accumulate):
            state.epoch, state.position, batch = next(stream)
            out.append(batch)
        return out

    def _autocast(self):
        return autocast(self.device, self.config.train.precision)

    def _train_step(self, batches: list) -> tuple[torch.Tensor, int, float]:
        """One optimizer step over the accumulated batches; the loss is normalised by the target
        tokens of the whole global batch, so any split over ranks and micro-batches gives the same update.
        Returns the summed loss, this rank's tokens and its model FLOPs (runtime/flops.py, counted on the host)."""
        local_tokens = sum(self.task.count(b) for b in batches)  # counted by the loader: no device sync here
        counted = self._flops_model or self.config.model
        local_flops = sum(self.task.flops(b, counted) for b in batches)
        tokens = summed(torch.tensor(float(local_tokens), device=self.device), self.world)
        total = torch.zeros((), device=self.device)
        for i, batch in enumerate(batches):
            batch = batch.to(self.device, non_blocking=True)
            sync = i == len(batches) - 1 or self.world == 1
            # the backward compiles too; without compiling, nothing to guard (and no CPU kind to work out: seconds)
            compiled = self.config.train.compile
            fix = "train with train.compile false"
            guard = compiling("train.compile", fix) if compiled else contextlib.nullcontext()
            with guard:
                with contextlib.nullcontext() if sync else self.wrapped.no_sync(), self._autocast():
                    loss = self.task.loss(self.wrapped, self.model, batch)
                # DDP averages gradients over ranks: scale by world so the result is sum / global tokens.
                (loss * self.world / tokens).backward()
            total += loss.detach()  # read (.item()) only when the loss is logged
        if self.config.train.clip_norm > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.train.clip_norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return total, local_tokens, local_flops

    def train(self) -> TrainState:
        # Rank 0 checks the directory and makes the data (the tokenizer); the others then open what it wrote.
        if self.rank == 0:
            saved = self._prepare_directory()
            data = self.task.prepare(rank0=True)
        barrier(self.world)
        if self.rank != 0:
            saved = Config.load(self.model_dir / "config.yaml") if ckpt.checkpoint_dirs(self.model_dir) else None
            data = self.task.prepare(rank0=False)
        self._check_same_data(data)
        if saved is not None:
            self._check_resumable(saved)
        self._build(data)
        self._resolve_precision(saved)
        if self.rank == 0:
            write_model_directory(self.model_dir, self.config, self.origin)
        self.log_config()
        self.task.describe(data)
        m, dtype = self.config.model, torch.bfloat16 if self.config.train.precision == "bf16" else torch.float32
        kernels = attention_kernels(m.d_model, m.n_heads, self.device, dtype)
        self.log(
            f"task {self.task.name}; {self.model.num_parameters():,} parameters; device {self.device}, "
            f"{self.world} process(es); torch.compile {'on' if self.config.train.compile else 'off'}; "
            "attention kernels: " + ", ".join(f"{kind} {kernel}" for kind, kernel in kernels.items())
        )
        state = self._resume()
        self._output_words(data, fresh=state.step == 0)
        stream = self.task.stream(data, state.epoch, state.position)
        try:
            self._loop(data, state, stream)
        finally:
            close = getattr(stream, "close", None)
            if close is not None:
                close()
        return state

    def _resolve_precision(self, saved: Config | None) -> None:
        """Turn train.precision into fp32 or bf16 (rank 0 measures, every rank takes its answer); a
        resumed run keeps the precision it started with unless another one is asked for by name."""
        t = self.config.train
        if self.rank == 0:
            if saved is not None and t.precision == "auto":
                precision = saved.train.precision
                self.log(f"precision {precision}: kept from the run being resumed")
            else:
                if saved is not None and t.precision != saved.train.precision:
                    self.log(
                        f"note: this run started in {saved.train.precision} and goes on in {t.precision}, as asked"
                    )
                choice = choose(t.precision, self.config.model, self.device, self.config.data.max_tokens, training=True)
                precision = choice.precision
                self.log(choice.describe())
                if choice.warning():
                    self.log(f"warning: {choice.warning()}")
        precision = from_rank0(precision if self.rank == 0 else None, self.world)
        self._set_config(dataclasses.replace(self.config, train=dataclasses.replace(t, precision=precision)))

    def _check_same_data(self, data) -> None:
        """Every rank must read the same bytes (a node that prepared its own copy from other files would not)."""
        if self.world == 1:
            return
        mine = self.task.fingerprint(data)
        for rank, theirs in enumerate(gathered(mine, self.world)):
            if theirs != mine:
                raise store.DataError(
                    f"rank {rank} reads other prepared data than rank {self.rank} "
                    f"({data.prepared.directory}); prepare once on a shared filesystem, or on "
                    "every node with the same files and the same command"
                )

    def log_config(self) -> None:
        if self.rank == 0:
            self.console.rule("configuration")
            self.console.print((self.model_dir / "config.yaml").read_text().rstrip(), highlight=False)
            self.console.rule()

    def _loop(self, data, state: TrainState, stream) -> None:
        """Train until max_steps, max_epochs, max_time or early stopping; the log says which ended it.

        Progress (console.progress_bar): a live bar on a terminal; otherwise (a log file, nohup, a scheduler,
        CI) a plain line every `log_every` updates, so a run shows signs of life before its first validation."""
        t = self.config.train
        metrics_path = self.model_dir / "metrics.jsonl"
        log_every = max(1, min(100, t.valid_every // 4))
        meter = Throughput(self.world, peak_flops(self.device, t.precision))
        per_epoch = self.task.epoch_batches(data) if t.max_epochs else None
        started, elapsed_before, steps_before = time.perf_counter(), state.elapsed, state.step
        clock = functools.partial(self._clock, started, elapsed_before)
        ended = self._limit_reached(state)
        bar = dict(enabled=self.rank == 0, completed=state.step, timed=False, transient=False)
        with progress_bar(self.console, "step", t.max_steps, **bar) as report:
            while ended is None:
                state.step += 1  # the schedule sees the budget spent when the step begins (elapsed of the last)
                epochs = state.epoch + state.position / per_epoch if per_epoch else None
                spent = progress(state.step - 1, state.elapsed, t, epochs)
                lr = learning_rate(state.step, t, self.config.model.d_model, spent)
                for group in self.optimizer.param_groups:
                    group["lr"] = lr
                self.model.train()
                meter.add(*self._train_step(self._next_batches(stream, state)))
                state.elapsed = clock()
                ended = self._limit_reached(state)
                report(1)
                validating = state.step % t.valid_every == 0 or ended
                if state.step % log_every == 0 or validating:
                    record = {"step": state.step, "epoch": state.epoch + 1, "lr": lr, **meter.window()}
                    record["elapsed_s"] = round(state.elapsed, 1)
                    per_step = (time.perf_counter() - started) / (state.step - steps_before)
                    left = (t.max_steps - state.step) * per_step
                    if t.max_seconds is not None:
                        left = min(left, t.max_seconds - state.elapsed)
                    done = state.epoch + state.position / per_epoch if per_epoch else 0.0
                    if done > 0:  # at this pace, to max_epochs
                        left = min(left, (t.max_epochs - done) * state.elapsed / done)
                    report.show(
                        f"epoch {record['epoch']} loss {record['train_loss']:.3f} lr {lr:.2e} "
                        f"{record['tokens_per_s']:,.0f} tok/s{_mfu_text(record.get('mfu'))}, "
                        f"{format_duration(state.elapsed)} elapsed, ~{format_duration(max(0.0, left))} left"
                    )
                    self._append(metrics_path, record)
                if validating:
                    if self._validate_and_save(data, state, metrics_path, clock):
                        ended = f"early stopping: no improvement in {t.patience} validations"
                    # a validation (and its save) that spent the time left ends the run here: one more update
                    # would be validated again, past the budget, for the change of one step
                    ended = ended or self._limit_reached(state)
                    meter.resume()  # tokens/s counts training steps only
        self.log(f"training ended at step {state.step} after {format_duration(state.elapsed)}: {ended}")
        if state.best_step:
            metric = self.config.metric
            self.log(
                f"the model directory holds step {state.best_step}'s weights, the best validation by {metric} "
                f"({abs(state.best_score):.3f}; the last checkpoints stay in checkpoints/)"
            )
        if meter.summary() is not None:
            self.log(meter.summary())

    def _clock(self, started: float, elapsed_before: float) -> float:
        """Seconds spent over every run of this model (this one began at `started`), rank 0's where time decides."""
        return rank0_clock(elapsed_before + time.perf_counter() - started, self._clock_world)

    @property
    def _clock_world(self) -> int:
        """The ranks that share rank 0's clock: all where time decides (max_time, a time-based schedule), else none
        need it (each rank's own clock only reports)."""
        return self.world if self.config.train.max_time is not None else 1

    def _limit_reached(self, state: TrainState) -> str | None:
        """Which limit ends the run now, in words naming the setting; None: go on."""
        t = self.config.train
        budget = t.max_seconds
        if state.step >= t.max_steps:
            return f"reached train.max_steps ({t.max_steps})"
        if budget is not None and state.elapsed >= budget:
            return f"reached train.max_time ({t.max_time}, {format_duration(state.elapsed)} spent)"
        if t.max_epochs is not None and state.epoch >= t.max_epochs:
            return f"reached train.max_epochs ({t.max_epochs})"
        return None

    def _append(self, path: Path, record: dict[str, Any]) -> None:
        if self.rank == 0:
            atomic.append_line(path, json.dumps(record))  # one write: a kill never leaves half a line before the next

    def _validate_and_save(self, data, state: TrainState, metrics_path: Path, clock: Callable[[], float]) -> bool:
        """Validate, checkpoint, update early stopping; True when training should stop. The checkpoint's elapsed
        time counts the validation (`clock`), so a resumed run's max_time counts it too."""
        t = self.config.train
        result = from_rank0(self.validate(data) if self.rank == 0 else {}, self.world)
        state.elapsed = clock()
        # Higher is better: BLEU as it is, loss negated; no dev set means every checkpoint counts as best.
        metric = self.config.metric
        score = -result.get("loss", 0.0) if metric == "loss" else result.get(metric, 0.0)
        improved = state.best_score is None or score > state.best_score
        if improved:
            state.best_score, state.best_step, state.bad_validations = score, state.step, 0
        else:
            state.bad_validations += 1
        record = {"step": state.step, "epoch": state.epoch + 1, **{f"valid_{k}": v for k, v in result.items()}}
        state.history.append(record)
        self._append(metrics_path, record)
        self.log(
            f"step {state.step}: "
            + ", ".join(f"{k} {v:.3f}" for k, v in result.items())
            + (" (best)" if improved else "")
        )
        self._save(state, score)
        if self.rank == 0:
            plot_metrics(metrics_path, self.model_dir / "curves.png")
        state.elapsed = clock()  # the save counts too
        return t.patience > 0 and state.bad_validations >= t.patience

    @torch.no_grad()
    def validate(self, data) -> dict[str, float]:
        """The task's validation metrics (translation: loss, perplexity, BLEU; lm: loss per token and per
        character; mlm: masked-token loss and accuracy; classify: accuracy and loss), in the run's precision."""
        with self._autocast():
            return self.task.validate(self.model.eval(), data)


def _mfu_text(value: float | None) -> str:
    return "" if value is None else f", MFU {value:.1%}"
