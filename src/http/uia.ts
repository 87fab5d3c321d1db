/** User-interactive auth by password for routes that cannot be undone (`users/password-auth.ts`). */
import { Type } from '@sinclair/typebox';
import type { FastifyReply } from 'fastify';
import type { PasswordAuth, UiaAuth } from '../users/password-auth.js';

/** The `auth` object of a request that may need the password again. */
export const AuthSchema = Type.Optional(
  Type.Object({
    type: Type.Optional(Type.String({ maxLength: 255 })),
    session: Type.Optional(Type.String({ maxLength: 255 })),
    identifier: Type.Optional(Type.Object({ type: Type.Optional(Type.String({ maxLength: 255 })), user: Type.Optional(Type.String({ maxLength: 255 })) })),
    user: Type.Optional(Type.String({ maxLength: 255 })),
    password: Type.Optional(Type.String({ maxLength: 512 })),
  }),
);

/** Runs `work` once the user has re-entered the password for `operation`; otherwise answers the 401 challenge. */
export async function withPassword(passwordAuth: PasswordAuth, reply: FastifyReply, userId: string, operation: string, auth: UiaAuth | undefined, work: () => Promise<unknown>): Promise<unknown> {
  const challenge = await passwordAuth.authorise(userId, operation, auth);
  if (challenge) return reply.code(challenge.status).send(challenge.body);
  return work();
}
