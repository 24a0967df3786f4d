// The TypeScript SDK peer over Streamable HTTP: ts_tasks_server.mjs's tools and task store
// (@modelcontextprotocol/sdk, pinned in benchmarks/peers/node.py) served by the SDK's
// StreamableHTTPServerTransport on Node's own http server, for benchmarks/http_peers.py.
//
// Stateful, as the SDK's simpleStreamableHttp example: an `initialize` POST without a session
// creates a transport (a random Mcp-Session-Id) and an McpServer connected to it; later POSTs
// with that id go to that transport. Every session's McpServer shares one task store, as in the
// example. The request body is parsed here and handed to handleRequest (what express.json()
// does in the example; no express, so no middleware cost is counted against the SDK).
//
// Tools:
//   echo {text}       a plain tool (registerTool): the 2025-11-25 plain tools/call. A plain call
//                     of a task tool would go through the SDK's automatic polling, which sleeps
//                     pollInterval (500 ms) before its first look at the task.
//   task_echo {text}  task-optional, completes at once (the create / tasks/result workload)
//   sleep {seconds}   task-optional, stays working (tasks/get and tasks/cancel); cancel stops it
//
// BENCH_JSON_RESPONSE=1 (the harness's default) sets enableJsonResponse: each POST is answered
// with one application/json body, as trio-mcp answers when nothing precedes the answer;
// 0 keeps the SDK's default, an SSE stream per POST.
//
// Prints `http-port PORT` once listening on 127.0.0.1; exits at end of stdin.

import http from 'node:http';
import process from 'node:process';
import { randomUUID } from 'node:crypto';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';
import { InMemoryTaskStore } from '@modelcontextprotocol/sdk/experimental/tasks';
import * as z from 'zod/v4';

const LONG_TTL_MS = 6 * 60 * 60 * 1000;
const DEFAULT_TTL_MS = Number(process.env.BENCH_DEFAULT_TTL_MS ?? LONG_TTL_MS);
const MAX_TTL_MS = Number(process.env.BENCH_MAX_TTL_MS || Math.max(DEFAULT_TTL_MS, LONG_TTL_MS));
const POLL_INTERVAL_MS = 500;
const JSON_RESPONSE = (process.env.BENCH_JSON_RESPONSE ?? '1') !== '0';

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

function makeServer() {
    const server = new McpServer(
        { name: 'ts-sdk-http-bench', version: '0.1.0' },
        {
            capabilities: {
                tools: {},
                tasks: { list: {}, cancel: {}, requests: { tools: { call: {} } } }
            },
            taskStore
        }
    );
    server.registerTool(
        'echo',
        { description: 'Return the text unchanged.', inputSchema: { text: z.string() } },
        async ({ text: value }) => text(value)
    );
    server.experimental.tasks.registerToolTask(
        'task_echo',
        {
            description: 'Return the text unchanged.',
            inputSchema: { text: z.string() },
            execution: { taskSupport: 'optional' }
        },
        {
            async createTask({ text: value }, { taskStore: store, taskRequestedTtl }) {
                const task = await store.createTask({ ttl: ttlOf(taskRequestedTtl), pollInterval: POLL_INTERVAL_MS });
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
    return server;
}

const transports = new Map();

function fail(res, status, code, message) {
    res.writeHead(status, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ jsonrpc: '2.0', error: { code, message }, id: null }));
}

async function handle(req, res) {
    if (req.url !== '/mcp') {
        return fail(res, 404, -32000, 'Not found');
    }
    let body;
    if (req.method === 'POST') {
        const chunks = [];
        for await (const chunk of req) chunks.push(chunk);
        try {
            body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
        } catch {
            return fail(res, 400, -32700, 'Parse error');
        }
    }
    const sessionId = req.headers['mcp-session-id'];
    let transport = sessionId === undefined ? undefined : transports.get(sessionId);
    if (transport === undefined) {
        if (sessionId !== undefined) {
            return fail(res, 404, -32001, 'Session not found');
        }
        if (req.method !== 'POST' || !isInitializeRequest(body)) {
            return fail(res, 400, -32000, 'Bad Request: No valid session ID provided');
        }
        const created = new StreamableHTTPServerTransport({
            sessionIdGenerator: () => randomUUID(),
            enableJsonResponse: JSON_RESPONSE,
            onsessioninitialized: id => {
                transports.set(id, created);
            }
        });
        created.onclose = () => {
            if (created.sessionId !== undefined) transports.delete(created.sessionId);
        };
        await makeServer().connect(created);
        transport = created;
    }
    await transport.handleRequest(req, res, body);
}

const httpServer = http.createServer((req, res) => {
    handle(req, res).catch(error => {
        console.error('ts_http_server:', error);
        if (!res.headersSent) fail(res, 500, -32603, 'Internal error');
    });
});
httpServer.listen(0, '127.0.0.1', () => {
    process.stdout.write(`http-port ${httpServer.address().port}\n`);
});

// Exit at end of input (the TTL timers would keep Node alive).
process.stdin.on('end', () => process.exit(0));
process.stdin.resume();
