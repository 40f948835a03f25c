// Calling executor from Node with @grpc/grpc-js and @grpc/proto-loader (no generated code).
//
//   cd examples/node && npm install
//   node executor_example.js [TARGET] [TASK]      # TARGET: unix:///…/executor.sock or host:port
//
// EXECUTOR_TARGET / EXECUTOR_TOKEN are read as by the other clients. It prints one JSON line per step.
'use strict';

const path = require('path');
const os = require('os');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const PROTO = path.join(__dirname, '..', '..', 'proto', 'executor', 'v1', 'executor.proto');

// keepCase: the fields keep the proto's snake_case names (task_id, exit_code), as in every other
// client and in the docs; enums as their names; oneofs: a message says which member is set
// (`event.event === 'stdout'`); longs as strings would lose nothing, but offsets here stay small.
const definition = protoLoader.loadSync(PROTO, {
  keepCase: true, longs: Number, enums: String, defaults: true, oneofs: true,
});
const { Executor } = grpc.loadPackageDefinition(definition).executor.v1;

function defaultTarget() {
  if (process.env.EXECUTOR_TARGET) return process.env.EXECUTOR_TARGET;
  const base = process.env.XDG_STATE_HOME || path.join(os.homedir(), '.local', 'state');
  return `unix://${path.join(base, 'executor', 'executor.sock')}`;
}

const target = process.argv[2] || defaultTarget();
const task = process.argv[3] || 'node-example';
const client = new Executor(target, grpc.credentials.createInsecure());
const metadata = new grpc.Metadata();
if (process.env.EXECUTOR_TOKEN) metadata.set('authorization', `Bearer ${process.env.EXECUTOR_TOKEN}`);

const emit = (step, value) => console.log(JSON.stringify({ step, ...value }));
const deadline = (seconds) => ({ deadline: new Date(Date.now() + seconds * 1000) });

// Exec: a server stream of events, the last one the exit.
function exec(command, timeoutSeconds = 30) {
  return new Promise((resolve, reject) => {
    const out = [];
    let exit = null;
    const call = client.Exec({ task_id: task, command, timeout_seconds: timeoutSeconds }, metadata,
      deadline(timeoutSeconds + 30));
    call.on('data', (ev) => {
      if (ev.event === 'stdout' || ev.event === 'stderr') out.push({ stream: ev.event, text: ev[ev.event].toString() });
      else if (ev.event === 'approval_required') emit('waiting_for_approval', { rule: ev.approval_required.rule });
      else if (ev.event === 'exit') exit = ev.exit;
    });
    call.on('error', reject);
    call.on('end', () => resolve({ out, exit }));
  });
}

// The unary calls, as promises.
const unary = (method, request, seconds = 60) => new Promise((resolve, reject) =>
  client[method](request, metadata, deadline(seconds), (err, res) => (err ? reject(err) : resolve(res))));

async function main() {
  const streamed = await exec('cd /tmp 2>/dev/null; export GREETING=hello; for i in 1 2 3; do echo "line $i"; done; echo oops >&2');
  emit('exec', {
    chunks: streamed.out.length,
    stdout: streamed.out.filter((c) => c.stream === 'stdout').map((c) => c.text).join(''),
    stderr: streamed.out.filter((c) => c.stream === 'stderr').map((c) => c.text).join(''),
    exit_code: streamed.exit.exit_code, status: streamed.exit.status,
  });

  const run = await unary('Run', { task_id: task, command: 'echo "$GREETING from $(pwd)"; exit 3' });
  emit('run', { stdout: run.stdout.toString(), exit_code: run.exit.exit_code, status: run.exit.status, cwd: run.exit.cwd });

  // A background process, its output read by offset until it ended and everything was read.
  const info = await unary('StartProcess', { task_id: task, command: 'for i in 1 2 3 4 5; do echo "tick $i"; sleep 0.2; done' });
  let offset = 0;
  let text = '';
  let reads = 0;
  for (;;) {
    const r = await unary('ReadProcessOutput', { process_id: info.process_id, offset, max_bytes: 7 });
    text += r.data.toString();
    offset = Number(r.next_offset);
    reads += 1;
    if (r.eof) break;
    if (!r.data.length) await new Promise((done) => setTimeout(done, 100));
  }
  const ended = await unary('WaitProcess', { process_id: info.process_id, timeout_seconds: 10 }, 40);
  emit('background', { process_id: info.process_id, output: text, reads, next_offset: offset,
    state: ended.state, exit_code: ended.exit_code });

  const denied = await exec('rm -rf /');
  emit('denied', { status: denied.exit.status, message: denied.exit.message });
  client.close();
}

main().catch((err) => {
  emit('error', { code: err.code, details: err.details || String(err) });
  process.exitCode = 1;
});
