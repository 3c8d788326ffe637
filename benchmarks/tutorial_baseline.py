"""The tutorial's Mario training loop, reimplemented from its text for side-by-side speed runs.

Written from the Chinese AI Studio tutorial's code (``game_env.py``, ``model.py``,
``rnd_model.py``, ``train.py``; described in docs/sources.md) with one change only: the Paddle-3
crash of ``paddle.concat([mask.sum(), paddle.to_tensor([1.0])])`` on a 0-D tensor (defect 5 in
docs/sources.md) is fixed by reshaping ``mask.sum()`` to ``[1]``. Everything that costs time is
kept as written:

* ``MultipleEnvironments``: one forked process per env, envs built in the parent, one
  pipe message per env per step carrying a float32 ``[1, 4, 84, 84]`` frame stack (/255.);
* ``OMP_NUM_THREADS=1`` set before Paddle is imported (the tutorial's first lines);
* ``MARIO`` and ``RNDModel`` built under ``set_global_initializer`` (reset afterwards so
  it does not leak into whatever runs next in the same process);
* ``Categorical`` sampling and the ``tril``/``triu`` log-prob trick on ``[N, N]`` matrices;
* per-step ``paddle.to_tensor`` of states/rewards/dones, the GAE loop over tensors;
* 10 epochs x 16 minibatches, each with a full RND forward (target + predictor) on the
  minibatch's next states and ``str(loss) == "nan"`` check;
* a greedy evaluation episode after every update in a freshly built env, with the
  intrinsic reward computed one frame at a time.

Left out (no effect on speed worth measuring): VisualDL writes, checkpoint files, prints.
The emulator is built as ``SuperMarioBrosEnv(rom_mode="vanilla", target=(w, s))``, which is
what ``gym_super_mario_bros.make("SuperMarioBros-w-s-v0")`` constructs (gym 0.26's
``TimeLimit`` wrapper around it breaks on nes-py's 4-tuple step).

    python benchmarks/tutorial_baseline.py --updates 1 --num-local-steps 128
"""

from __future__ import annotations

import os

os.environ["OMP_NUM_THREADS"] = "1"  # the tutorial's train.py does this before importing paddle

import argparse  # noqa: E402
import json  # noqa: E402
import multiprocessing as mp  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections import deque  # noqa: E402

import cv2  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import paddle  # noqa: E402
import paddle.nn as nn  # noqa: E402
import paddle.nn.functional as F  # noqa: E402
from paddle.distribution import Categorical  # noqa: E402
from paddle.nn import Conv2D, Layer, Linear, ReLU  # noqa: E402

from mario.env import _actions, make_stage  # noqa: E402  (gym-super-mario-bros, muted import; both stacks)


# ----------------------------------------------------------------------------- game_env.py
def process_frame(frame):
    if frame is not None:
        frame = cv2.cvtColor(frame, cv2.COLOR_RGB2GRAY)
        frame = cv2.resize(frame, (84, 84))[None, :, :] / 255.0
        return frame
    return np.zeros((1, 84, 84))


class CustomReward:
    def __init__(self, env):
        self.env = env
        self.curr_score = 0

    def step(self, action):
        state, reward, done, info = self.env.step(action)
        state = process_frame(state)
        reward += (info["score"] - self.curr_score) / 40.0
        self.curr_score = info["score"]
        if done:
            if info["flag_get"]:
                reward += 50
                reward += info["time"]
            else:
                reward -= 50
        return state, reward / 10.0, done, info

    def reset(self):
        self.curr_score = 0
        return process_frame(self.env.reset())


class CustomSkipFrame:
    def __init__(self, env, skip=4):
        self.env = env
        self.skip = skip
        self.states = np.zeros((skip, 84, 84), dtype=np.float32)

    def step(self, action):
        total_reward = 0
        last_states = []
        for i in range(self.skip):
            state, reward, done, info = self.env.step(action)
            total_reward += reward
            if i >= self.skip / 2:
                last_states.append(state)
            if done:
                self.reset()
                return self.states[None, :, :, :].astype(np.float32), total_reward, done, info
        max_state = np.max(np.concatenate(last_states, 0), 0)
        self.states[:-1] = self.states[1:]
        self.states[-1] = max_state
        return self.states[None, :, :, :].astype(np.float32), total_reward, done, info

    def reset(self):
        state = self.env.reset()
        self.states = np.concatenate([state for _ in range(self.skip)], 0)
        return self.states[None, :, :, :].astype(np.float32)


ACTIONS = {"right": _actions.RIGHT_ONLY, "simple": _actions.SIMPLE_MOVEMENT, "complex": _actions.COMPLEX_MOVEMENT}


def create_train_env(world, stage, actions):
    _, env = make_stage(world, stage, actions)  # the JoypadSpace, seen through gym 0.26's 4-tuple API
    return CustomSkipFrame(CustomReward(env))


class MultipleEnvironments:
    def __init__(self, world, stage, action_type, num_envs):
        ctx = mp.get_context("fork")  # the tutorial's default on Linux
        self.agent_conns, self.env_conns = zip(*[ctx.Pipe() for _ in range(num_envs)])
        actions = ACTIONS.get(action_type, _actions.COMPLEX_MOVEMENT)
        self.envs = [create_train_env(world, stage, actions) for _ in range(num_envs)]
        self.num_states = 4
        self.num_actions = len(actions)
        self.processes = []
        for index in range(num_envs):
            process = ctx.Process(target=self.run, args=(index,), daemon=True)
            process.start()
            self.processes.append(process)
            self.env_conns[index].close()

    def run(self, index):
        for conn in self.agent_conns:  # (the tutorial closes only its own; closing all lets workers see EOF)
            conn.close()
        while True:
            try:
                request, action = self.env_conns[index].recv()
            except EOFError:  # (the tutorial's loop never exits; this lets the benchmark end)
                return
            if request == "step":
                self.env_conns[index].send(self.envs[index].step(int(action)))
            elif request == "reset":
                self.env_conns[index].send(self.envs[index].reset())
            else:
                raise NotImplementedError

    def close(self):
        for c in self.agent_conns:
            c.close()
        for p in self.processes:
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()


# ----------------------------------------------------------------------------- model.py
class MARIO(Layer):
    def __init__(self, input_num, actions):
        super().__init__()
        self.fc = 32 * 6 * 6
        nn.initializer.set_global_initializer(nn.initializer.KaimingUniform(), nn.initializer.Constant(value=0.0))
        self.conv0 = Conv2D(
            out_channels=32, kernel_size=3, stride=2, padding=1, dilation=[1, 1], groups=1, in_channels=input_num
        )
        self.relu0 = ReLU()
        self.conv1 = Conv2D(
            out_channels=32, kernel_size=3, stride=2, padding=1, dilation=[1, 1], groups=1, in_channels=32
        )
        self.relu1 = ReLU()
        self.conv2 = Conv2D(
            out_channels=32, kernel_size=3, stride=2, padding=1, dilation=[1, 1], groups=1, in_channels=32
        )
        self.relu2 = ReLU()
        self.conv3 = Conv2D(
            out_channels=32, kernel_size=3, stride=2, padding=1, dilation=[1, 1], groups=1, in_channels=32
        )
        self.relu3 = ReLU()
        self.linear0 = Linear(in_features=int(self.fc), out_features=512)
        self.linear1 = Linear(in_features=512, out_features=actions)
        self.linear2 = Linear(in_features=512, out_features=1)

    def forward(self, x):
        x = self.relu0(self.conv0(x))
        x = self.relu1(self.conv1(x))
        x = self.relu2(self.conv2(x))
        x = self.relu3(self.conv3(x))
        x = paddle.reshape(x, [x.shape[0], -1])
        x = self.linear0(x)
        return self.linear1(x), self.linear2(x)


# ----------------------------------------------------------------------------- rnd_model.py
class Flatten(nn.Layer):
    def forward(self, input):
        return input.reshape([input.shape[0], -1])


class RNDModel(nn.Layer):
    def __init__(self, input_size, output_size):
        super().__init__()
        feature_output = 7 * 7 * 64
        nn.initializer.set_global_initializer(nn.initializer.KaimingNormal(), nn.initializer.Constant(value=0.0))

        def convs():
            return [
                nn.Conv2D(input_size, 32, 8, 4),
                nn.LeakyReLU(),
                nn.Conv2D(32, 64, 4, 2),
                nn.LeakyReLU(),
                nn.Conv2D(64, 64, 3, 1),
                nn.LeakyReLU(),
                Flatten(),
            ]

        self.predictor = nn.Sequential(
            *convs(), nn.Linear(feature_output, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 512)
        )
        self.target = nn.Sequential(*convs(), nn.Linear(feature_output, 512))
        for index, param in enumerate(self.target.parameters()):
            param.stop_gradient = True
            self.target.parameters()[index] = param.sign() * param.abs().sqrt()  # a no-op, as in the tutorial

    def forward(self, next_obs):
        return self.predictor(next_obs), self.target(next_obs)


def compute_intrinsic_reward(rnd, next_obs):
    next_obs = paddle.to_tensor(next_obs, dtype="float32")
    target_next_feature = rnd.target(next_obs)
    predict_next_feature = rnd.predictor(next_obs)
    intrinsic_reward = (target_next_feature - predict_next_feature).pow(2).sum(1) / 2
    return intrinsic_reward.numpy().item()


# ----------------------------------------------------------------------------- train.py
gamma, tau, beta, epsilon = 0.9, 1.0, 0.01, 0.2
update_proportion = 0.25
max_actions = 512
num_global_steps = int(5e6)


def evaluate(cfg, local_model, rnd_model):
    env = create_train_env(cfg.world, cfg.stage, ACTIONS[cfg.action_type])
    state = paddle.to_tensor(env.reset(), dtype="float32")
    curr_step, extrinsic_reward, intrinsic_reward = 0, 0, 0
    actions = deque(maxlen=max_actions)
    while True:
        curr_step += 1
        logits, value = local_model(state)
        policy = F.softmax(logits, axis=-1).numpy()
        action = np.argmax(policy)
        state, reward, done, info = env.step(int(action))
        extrinsic_reward += reward
        intrinsic_reward += compute_intrinsic_reward(rnd_model, state)
        actions.append(action)
        if curr_step > num_global_steps or actions.count(actions[0]) == actions.maxlen:
            done = True
        if done:
            break
        state = paddle.to_tensor(state, dtype="float32")
    return curr_step, extrinsic_reward, intrinsic_reward


def train(cfg, on_phase=None):
    """Run ``cfg.updates`` updates; returns per-update phase timings (seconds)."""
    paddle.seed(cfg.seed)
    num_processes, num_local_steps, batch_size, num_epochs = (
        cfg.num_processes,
        cfg.num_local_steps,
        cfg.batch_size,
        cfg.num_epochs,
    )
    envs = MultipleEnvironments(cfg.world, cfg.stage, cfg.action_type, num_processes)
    try:
        model = MARIO(envs.num_states, envs.num_actions)
        rnd = RNDModel(envs.num_states, envs.num_actions)
        nn.initializer.set_global_initializer(None, None)  # (not in the tutorial: stop the leak here)
        clip_grad = paddle.nn.ClipGradByNorm(clip_norm=0.5)
        optimizer = paddle.optimizer.Adam(learning_rate=cfg.lr, parameters=model.parameters(), grad_clip=clip_grad)
        forward_mse = nn.MSELoss(reduction="none")
        [agent_conn.send(("reset", None)) for agent_conn in envs.agent_conns]
        curr_states = [agent_conn.recv() for agent_conn in envs.agent_conns]
        curr_states = paddle.to_tensor(np.concatenate(curr_states, 0), dtype="float32")
        timings = []
        for curr_episode in range(1, cfg.updates + 1):
            t0 = time.perf_counter()
            old_log_policies, actions, values, states, next_states, rewards, dones = [], [], [], [], [], [], []
            train_reward = 0
            for _ in range(num_local_steps):
                states.append(curr_states)
                logits, value = model(curr_states)
                values.append(value.squeeze())
                policy = F.softmax(logits, axis=-1)
                old_m = Categorical(policy)
                action = old_m.sample([1]).squeeze()
                actions.append(action)
                origin_old_log_policy = old_m.log_prob(action)
                old_log_policy = paddle.tensor.tril(origin_old_log_policy)
                old_log_policy = paddle.tensor.triu(old_log_policy)
                old_log_policy = paddle.sum(old_log_policy, axis=1)
                old_log_policies.append(old_log_policy)
                [
                    agent_conn.send(("step", act))
                    for agent_conn, act in zip(envs.agent_conns, action.numpy().astype("int16").tolist())
                ]
                state, reward, done, info = zip(*[agent_conn.recv() for agent_conn in envs.agent_conns])
                train_reward += np.mean(reward)
                state = paddle.to_tensor(np.concatenate(state, 0), dtype="float32")
                reward = paddle.to_tensor(reward, dtype="float32")
                done = paddle.to_tensor(done, dtype="float32")
                rewards.append(reward)
                dones.append(done)
                next_states.append(state)
                curr_states = state
            (
                _,
                next_value,
            ) = model(curr_states)
            next_value = next_value.squeeze()
            old_log_policies = paddle.concat(old_log_policies, axis=-1).detach()
            actions = paddle.concat(actions).squeeze()
            values = paddle.concat(values).squeeze().detach()
            states = paddle.concat(states).squeeze()
            next_states = paddle.concat(next_states).squeeze()
            gae = paddle.to_tensor([0.0])
            R = []
            for value, reward, done in list(zip(values, rewards, dones))[::-1]:
                gae = gae * gamma * tau
                gae = gae + reward + gamma * next_value.detach() * (1.0 - done) - value.detach()
                next_value = value
                R.append(gae + value.detach())
            R = R[::-1]
            R = paddle.concat(R).detach()
            advantages = R - values
            t1 = time.perf_counter()
            n = num_local_steps * num_processes
            for i in range(num_epochs):
                model.train()
                indice = paddle.randperm(n)
                for j in range(batch_size):
                    batch_indices = indice[int(j * (n / batch_size)) : int((j + 1) * (n / batch_size))]
                    batch_advantages = paddle.gather(advantages, batch_indices, axis=0)
                    batch_R = paddle.gather(R, batch_indices, axis=0)
                    batch_old_log_policies = paddle.gather(old_log_policies, batch_indices, axis=0)
                    batch_states = paddle.gather(states, batch_indices, axis=0)
                    batch_next_states = paddle.gather(next_states, batch_indices, axis=0)
                    batch_actions = paddle.gather(actions, batch_indices, axis=0)
                    predict_next_state_feature, target_next_state_feature = rnd(batch_next_states)
                    forward_loss = forward_mse(predict_next_state_feature, target_next_state_feature.detach()).mean(-1)
                    mask = paddle.rand([len(forward_loss)])
                    mask = (mask < update_proportion).cast("float32")
                    # the only change: mask.sum() is 0-D on Paddle 3 and cannot be concatenated with a [1] tensor
                    forward_loss = (forward_loss * mask).sum() / paddle.max(
                        paddle.concat([mask.sum().reshape([1]), paddle.to_tensor([1.0])])
                    )
                    logits, value = model(batch_states)
                    new_policy = F.softmax(logits, axis=-1)
                    new_m = Categorical(new_policy)
                    origin_new_log_policy = new_m.log_prob(batch_actions)
                    new_log_policy = paddle.tensor.tril(origin_new_log_policy)
                    new_log_policy = paddle.tensor.triu(new_log_policy)
                    new_log_policy = paddle.sum(new_log_policy, axis=1).squeeze()
                    ratio = paddle.exp(new_log_policy - batch_old_log_policies)
                    actor_loss = paddle.concat(
                        [
                            paddle.unsqueeze(ratio * batch_advantages, axis=0),
                            paddle.unsqueeze(
                                paddle.clip(ratio, 1.0 - epsilon, 1.0 + epsilon) * batch_advantages, axis=0
                            ),
                        ]
                    )
                    actor_loss = -paddle.mean(paddle.min(actor_loss, axis=0))
                    critic_loss = F.smooth_l1_loss(batch_R, value.squeeze())
                    entropy_loss = paddle.mean(new_m.entropy())
                    total_loss = actor_loss + critic_loss - beta * entropy_loss + forward_loss
                    if str(total_loss.numpy().item()) == "nan":
                        continue
                    optimizer.clear_grad()
                    total_loss.backward()
                    optimizer.step()
            t2 = time.perf_counter()
            model.eval()
            eval_steps, _, _ = evaluate(cfg, model, rnd)
            t3 = time.perf_counter()
            timings.append(
                {
                    "collect": t1 - t0,
                    "update": t2 - t1,
                    "eval": t3 - t2,
                    "eval_steps": eval_steps,
                    "steps": n,
                    "loss": float(total_loss),
                }
            )
            if on_phase:
                on_phase(timings[-1])
        return timings
    finally:
        envs.close()


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--updates", type=int, default=1)
    p.add_argument("--num-local-steps", type=int, default=512)
    p.add_argument("--num-processes", type=int, default=6)
    p.add_argument("--num-epochs", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=16, help="number of minibatches (the tutorial's name)")
    p.add_argument("--lr", type=float, default=4e-5)
    p.add_argument("--world", type=int, default=4)
    p.add_argument("--stage", type=int, default=4)
    p.add_argument("--action-type", default="simple")
    p.add_argument("--seed", type=int, default=314)
    p.add_argument("--json", default="", help="write the timings here")
    return p.parse_args(argv)


if __name__ == "__main__":
    args = parse()
    out = train(args, on_phase=lambda t: print(json.dumps(t), flush=True))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f)
