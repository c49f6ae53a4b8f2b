"""A chat request's images and audio clips -> the engine's `MediaItem`s: fetching (`sources`,
`url_fetch`), decoding within limits (`images`, `audio`), the model's processor
(`processors`), placeholder expansion (`placeholders`), all driven by `loader.MediaLoader`."""
