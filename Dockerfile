# bot-homeserver: a small non-root image; the database lives on the /data volume.
#   docker build -t bot-homeserver .
#   docker run -p 8008:8008 -v bhs-data:/data -e BOT_HOMESERVER_SERVER_NAME=example.org bot-homeserver
#   docker exec -it <container> bot-homeserver create-bot hello

FROM node:24-bookworm-slim AS build
WORKDIR /app
# better-sqlite3 and argon2 compile their native parts on install.
RUN apt-get update && apt-get install -y --no-install-recommends python3 make g++ && rm -rf /var/lib/apt/lists/*
COPY package.json package-lock.json ./
COPY tsconfig.json tsconfig.build.json ./
COPY bin ./bin
COPY scripts ./scripts
COPY src ./src
COPY migrations ./migrations
RUN npm ci --no-audit --no-fund && npm prune --omit=dev

FROM node:24-bookworm-slim
# MALLOC_MMAP_THRESHOLD_: argon2's 19 MiB per password hash stays a separate mapping, returned to
# the system when freed, instead of settling in glibc's per-thread pools (docs/configuration.md).
ENV NODE_ENV=production \
    MALLOC_MMAP_THRESHOLD_=131072 \
    BOT_HOMESERVER_LISTEN__HOST=0.0.0.0 \
    BOT_HOMESERVER_LISTEN__PORT=8008 \
    BOT_HOMESERVER_DATABASE__PATH=/data/homeserver.db
WORKDIR /app
COPY --from=build /app/package.json ./
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY --from=build /app/bin ./bin
COPY config.example.yaml ./
RUN ln -s /app/bin/bot-homeserver.js /usr/local/bin/bot-homeserver \
    && mkdir -p /data && chown node:node /data
USER node
VOLUME ["/data"]
EXPOSE 8008
HEALTHCHECK --interval=30s --timeout=3s CMD node -e "fetch('http://127.0.0.1:8008/health').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"
# Set BOT_HOMESERVER_CONFIG=/data/homeserver.yaml (or mount a file) for a config file.
CMD ["node", "bin/bot-homeserver.js", "start"]
