// The TypeScript SDK peer: the benchmark server of benchmarks/server.py written with the
// official TypeScript SDK (@modelcontextprotocol/sdk, pinned in benchmarks/peers/node.py) and its
// experimental tasks support, served over stdio (newline-delimited JSON-RPC).
//
// Tools, both task-optional (registerToolTask with taskSupport 'optional'):
//   echo {text}      completes at once with the text (a CallToolResult with one text block)
//   sleep {seconds}  stays `working` for that long ("slept Ns"); tasks/cancel stops it
//
// Tasks live in the SDK's InMemoryTaskStore, with the same TTL rules as the trio-mcp bench server:
// the requested ttl, or BENCH_DEFAULT_TTL_MS (six hours) when none is asked for, capped at
// BENCH_MAX_TTL_MS; pollInterval 500 ms. The store is subclassed only so that a cancel also
// stops the tool's work: the SDK's tasks/cancel handler marks the task cancelled in the store and
// leaves the work running, so updateTaskStatus(..., 'cancelled') clears the task's timer.
//
// The SDK's own behaviour is kept everywhere else, and differs from trio-mcp's in two ways the
// comparison has to live with: a completed task sends notifications/tasks/status (as ours does),
// a cancelled one does not (ours does); and tasks/result on a task that is still working polls
// the store every pollInterval instead of waiting for an event (the workloads only ask for the
// results of completed tasks). No TaskMessageQueue: the tools never ask the client anything.
//
// Run it through the harness (benchmarks/peers/node.py), which copies it next to the
// node_modules it imports from: `node .cache/bench/ts_tasks_server.mjs`. It exits at end of input.

import process from 'node:process';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { InMemoryTaskStore } from '@modelcontextprotocol/sdk/experimental/tasks';
import * as z from 'zod/v4';

const LONG_TTL_MS = 6 * 60 * 60 * 1000;
const DEFAULT_TTL_MS = Number(process.env.BENCH_DEFAULT_TTL_MS ?? LONG_TTL_MS);
const MAX_TTL_MS = Number(process.env.BENCH_MAX_TTL_MS || Math.max(DEFAULT_TTL_MS, LONG_TTL_MS));
const POLL_INTERVAL_MS = 500;

/** InMemoryTaskStore whose cancel also stops the task's work (a timer per working task). */
class CancellingTaskStore extends InMemoryTaskStore {
    constructor() {
        super();
        this.work = new Map();
    }

    async updateTaskStatus(taskId, status, statusMessage, sessionId) {
        await super.updateTaskStatus(taskId, status, statusMessage, sessionId);
        if (status === 'cancelled') {
            const timer = this.work.get(taskId);
            if (timer !== undefined) {
                clearTimeout(timer);
                this.work.delete(taskId);
            }
        }
    }
}

const taskStore = new CancellingTaskStore();
const server = new McpServer(
    { name: 'ts-sdk-bench', version: '0.1.0' },
    {
        capabilities: {
            tools: {},
            tasks: { list: {}, cancel: {}, requests: { tools: { call: {} } } }
        },
        taskStore
    }
);

function ttlOf(requested) {
    return Math.min(requested ?? DEFAULT_TTL_MS, MAX_TTL_MS);
}

function text(value) {
    return { content: [{ type: 'text', text: value }] };
}

const lookups = {
    async getTask(_args, { taskId, taskStore: store }) {
        return await store.getTask(taskId);
    },
    async getTaskResult(_args, { taskId, taskStore: store }) {
        return await store.getTaskResult(taskId);
    }
};

server.experimental.tasks.registerToolTask(
    'echo',
    {
        description: 'Return the text unchanged.',
        inputSchema: { text: z.string() },
        execution: { taskSupport: 'optional' }
    },
    {
        async createTask({ text: value }, { taskStore: store, taskRequestedTtl }) {
            const task = await store.createTask({ ttl: ttlOf(taskRequestedTtl), pollInterval: POLL_INTERVAL_MS });
            // The work runs once the CreateTaskResult is on its way, as a spawned task would.
            setImmediate(() => {
                store.storeTaskResult(task.taskId, 'completed', text(value)).catch(() => {});
            });
            return { task };
        },
        ...lookups
    }
);

server.experimental.tasks.registerToolTask(
    'sleep',
    {
        description: 'Sleep for the given seconds (an idle live task); cancellable.',
        inputSchema: { seconds: z.number() },
        execution: { taskSupport: 'optional' }
    },
    {
        async createTask({ seconds }, { taskStore: store, taskRequestedTtl }) {
            const task = await store.createTask({ ttl: ttlOf(taskRequestedTtl), pollInterval: POLL_INTERVAL_MS });
            const timer = setTimeout(() => {
                taskStore.work.delete(task.taskId);
                store.storeTaskResult(task.taskId, 'completed', text(`slept ${seconds}s`)).catch(() => {});
            }, seconds * 1000);
            taskStore.work.set(task.taskId, timer);
            return { task };
        },
        ...lookups
    }
);

// Exit at end of input, as a stdio MCP server should (the TTL timers would keep Node alive).
process.stdin.on('end', () => process.exit(0));
await server.connect(new StdioServerTransport());
